"""The SyncLane page's FastAPI app, mounted by Airflow's API server under ``/synclane``.

Routes are thin: each read is one :class:`~synclane_provider.core.ops.monitor.Monitor` call and each action one
:class:`~synclane_provider.core.ops.operations.Operations` call, the same ones ``airflow synclane`` and the
requeue DAG make. The endpoints are documented in ``docs/operating.md``.

Nothing is served to an anonymous caller: a plugin's app is public unless its routes depend on Airflow's
authentication, so every route (the page and its files too) requires a user whom Airflow's auth manager
lets read DAGs, and every action a user it lets edit DAGs. The same token or UI cookie as Airflow's own
API is accepted; without one the answer is 401, with one that may not, 403.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from pydantic import BaseModel, Field

from synclane_provider.configured import shared_operations
from synclane_provider.core import DeclarationError, Operations, SyncLaneError, UnknownQueueError
from synclane_provider.core.credentials import CredentialKind, Credentials
from synclane_provider.core.errors import UnknownJobTypeError, UnknownOwnerError
from synclane_provider.core.ops.monitor import MAX_LISTING, Monitor, plain

STATIC = {"synclane.js": "text/javascript", "synclane.css": "text/css"}


def _read_access() -> Any:
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag("GET"))


def _edit_access() -> Any:
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag("PUT"))


def _user_name() -> Any:
    """The name of the user Airflow authenticated, for what an action records (who paused an owner)."""
    from airflow.api_fastapi.core_api.security import get_user

    def name(user: Any = Depends(get_user)) -> str:
        return str(user.get_name())

    return Depends(name)


class RequeueBody(BaseModel):
    owner: str | None = Field(None, description="only this owner's jobs")
    type: str | None = Field(None, description="only jobs of this type")
    job_id: int | None = Field(None, description="only this job")
    force_deletions: bool = Field(
        False, description="let a snapshot refused for the share of rows it would delete go ahead and delete them"
    )


class CancelBody(BaseModel):
    owner: str = Field(description="the owner whose work stops")
    type: str | None = Field(None, description="only jobs of this type")
    reason: str = Field("cancelled from the SyncLane page", description="written into each job's error")


class PauseBody(BaseModel):
    owner: str = Field(description="the owner to pause")
    reason: str = Field(description="why, e.g. 'token revoked'")


class ResumeBody(BaseModel):
    owner: str = Field(description="the paused owner to resume")


class CredentialsBody(BaseModel):
    """What the page's credentials form sends. Every field is optional to the schema, so that a refusal (422)
    never quotes the body back with its values: what is missing is named by :class:`Credentials` instead."""

    owner: str | None = Field(None, description="the owner whose credentials these are")
    kind: str | None = Field(None, description="'api_key' or 'oauth'")
    api_key: str | None = Field(None, description="the API key (kind api_key)")
    access_token: str | None = Field(None, description="the OAuth access token (kind oauth)")
    refresh_token: str | None = Field(None, description="the OAuth refresh token (kind oauth)")
    expires_in: float | None = Field(None, description="seconds until the access token expires (kind oauth)")

    def credentials(self, *, now: datetime) -> Credentials:
        """The credentials, read by the one reader of a person's credentials (``Credentials.from_text``), which
        checks them and names what is wrong, never a value. Only the fields of the chosen kind are read."""
        if self.kind not in {kind.value for kind in CredentialKind}:
            raise ValueError(f"unknown credential kind {self.kind!r}: one of api_key, oauth")
        fields = ("api_key",) if self.kind == CredentialKind.API_KEY.value else _OAUTH_FIELDS
        given = {name: getattr(self, name) for name in fields if getattr(self, name) not in (None, "")}
        if self.kind == CredentialKind.API_KEY.value and not given:
            raise ValueError("credentials of kind api_key need an api_key")
        return Credentials.from_text(json.dumps(given), now=now)


_OAUTH_FIELDS = ("access_token", "refresh_token", "expires_in")


class ResyncBody(BaseModel):
    type: str = Field(description="the job type to sync again")
    start: datetime = Field(description="the range's start, ISO 8601 with a time zone")
    end: datetime = Field(description="the range's end (excluded), ISO 8601 with a time zone")
    owners: list[str] | None = Field(None, description="only these owners (empty: every owner)")
    reason: str = Field(description="why, shown with the request")
    key: str | None = Field(None, description="the request's key: the same key again adds nothing")
    dry_run: bool = Field(False, description="make nothing: answer with the windows the request would make, by owners")


class PlanBody(BaseModel):
    owner: str | None = Field(None, description="only this owner (empty: every owner)")


@contextmanager
def _answering() -> Iterator[Operations]:
    """The shared operations, with the engine's refusals as 4xx answers that say what was wrong."""
    try:
        yield shared_operations()
    except (UnknownQueueError, UnknownJobTypeError, UnknownOwnerError) as exc:
        raise HTTPException(404, str(exc)) from None
    except (DeclarationError, ValueError) as exc:
        raise HTTPException(400, str(exc)) from None
    except SyncLaneError as exc:
        raise HTTPException(503, str(exc)) from None


def _jobs_word(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def create_app(
    read_access: Callable[[], Any] = _read_access,
    edit_access: Callable[[], Any] = _edit_access,
    user_name: Callable[[], Any] = _user_name,
) -> FastAPI:
    """The app; the access dependencies (and the user's name) are Airflow's unless a test passes its own.

    Every route needs read access (the app's own dependency); the action routers are included behind edit
    access as well, so a route added to one of them cannot be served without it.
    """
    app = FastAPI(
        title="SyncLane",
        description="SyncLane's queues, lanes, owners and jobs, and the operator's actions on them.",
        dependencies=[read_access()],
        # FastAPI's own docs and schema routes would ignore the dependencies above and answer anyone:
        # they are added by _documents as routes of the app, behind the same access as the page.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.include_router(_documents(app))
    app.include_router(_reads())
    for actions in (_job_actions(), _owner_actions(user_name), _resync_actions(user_name)):
        app.include_router(actions, dependencies=[edit_access()])
    return app


def _documents(app: FastAPI) -> APIRouter:
    """The page, its files, and the API's schema and docs pages."""
    router = APIRouter()

    @router.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @router.get("/docs", include_in_schema=False)
    def docs(request: Request) -> Response:
        return get_swagger_ui_html(openapi_url=_mounted(request, "/openapi.json"), title="SyncLane API")

    @router.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> Response:
        return get_redoc_html(openapi_url=_mounted(request, "/openapi.json"), title="SyncLane API")

    @router.get("/", include_in_schema=False)
    def page() -> Response:
        return Response(_static("index.html"), media_type="text/html")

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC:
            raise HTTPException(404, f"no file {name!r}")
        return Response(_static(name), media_type=STATIC[name], headers={"Cache-Control": "no-cache"})

    return router


def _reads() -> APIRouter:
    """What the page shows: each route one Monitor or Operations read."""
    router = APIRouter()

    @router.get("/api/queues", summary="Every declared queue: jobs by status, the last hour, the backlog's age")
    def queues() -> list[dict[str, Any]]:
        with _answering() as operations:
            monitor = Monitor(operations)
            return [
                {**plain(summary), "types": [t.name for t in operations.synclane.queue(summary.queue).types]}
                for summary in monitor.queues()
            ]

    @router.get("/api/queues/{queue}/lanes", summary="Busy lanes by name: running job, waiting jobs, last error")
    def lanes(queue: str, after: str | None = None, limit: int = Query(50, ge=1, le=MAX_LISTING)) -> dict[str, Any]:
        with _answering() as operations:
            return plain(Monitor(operations).lanes(queue, after=after, limit=limit))

    @router.get("/api/queues/{queue}/owners", summary="Owners by name: health, pause, initial load, freshness, trouble")
    def owners(
        queue: str,
        after: str | None = None,
        owner: str | None = None,
        troubled: bool = False,
        limit: int = Query(50, ge=1, le=MAX_LISTING),
    ) -> dict[str, Any]:
        with _answering() as operations:
            return plain(
                Monitor(operations).owners(queue, after=after, owner=owner or None, troubled=troubled, limit=limit)
            )

    @router.get("/api/queues/{queue}/owners/{owner}/progress", summary="One owner's initial-load progress")
    def progress(queue: str, owner: str, type: str | None = None) -> dict[str, Any]:
        with _answering() as operations:
            done = operations.progress(queue, owner, type=type or None)
            return {**plain(done), "complete": done.complete, "settled": done.settled}

    @router.get("/api/queues/{queue}/jobs", summary="Jobs newest first, filtered, a page at a time")
    def jobs(
        queue: str,
        owner: str | None = None,
        type: str | None = None,
        status: str | None = None,
        mode: str | None = None,
        before: int | None = None,
        limit: int = Query(50, ge=1, le=MAX_LISTING),
    ) -> dict[str, Any]:
        with _answering() as operations:
            page = Monitor(operations).jobs(
                queue,
                owner=owner or None,
                type=type or None,
                status=status or None,
                mode=mode or None,
                before=before,
                limit=limit,
            )
            return plain(page)

    @router.get("/api/jobs/{job_id}", summary="One job's whole row")
    def job(job_id: int) -> dict[str, Any]:
        with _answering() as operations:
            found = operations.job(job_id)
            if found is None:
                raise HTTPException(404, f"no job {job_id}")
            return plain(found)

    @router.get("/api/queues/{queue}/resyncs", summary="Re-sync requests, newest first: progress, who asked and why")
    def resyncs(queue: str, limit: int = Query(50, ge=1, le=MAX_LISTING)) -> list[dict[str, Any]]:
        with _answering() as operations:
            return [{**plain(p), "finished": p.finished} for p in operations.resyncs(queue, limit=limit)]

    return router


def _job_actions() -> APIRouter:
    """Requeue, cancel and plan: each route one Operations call."""
    router = APIRouter()

    @router.post(
        "/api/queues/{queue}/requeue",
        summary="Fresh attempts for failed, deferred and abandoned jobs (a job, an owner, an owner's type)",
    )
    def requeue(queue: str, body: RequeueBody) -> dict[str, Any]:
        with _answering() as operations:
            count = operations.requeue(
                queue,
                owner=body.owner or None,
                type=body.type or None,
                job_id=body.job_id,
                force_deletions=body.force_deletions,
            )
        if body.job_id is not None:
            message = (
                f"Requeued job #{body.job_id} of queue {queue}: pending, from its cursor."
                if count
                else f"Job #{body.job_id} of queue {queue} is not failed, deferred or abandoned: nothing requeued."
            )
        else:
            scope = _scope(queue, body.owner, body.type)
            message = (
                f"Requeued {_jobs_word(count)} {scope}: pending, each from its cursor."
                if count
                else f"Nothing to requeue {scope}: no failed, deferred or abandoned job."
            )
        return {"requeued": count, "message": message}

    @router.post(
        "/api/queues/{queue}/cancel",
        summary="Stop an owner's work: waiting jobs abandoned now, a running one after its page",
    )
    def cancel(queue: str, body: CancelBody) -> dict[str, Any]:
        with _answering() as operations:
            done = operations.cancel(queue, body.owner, body.reason, type=body.type or None)
        scope = _scope(queue, body.owner, body.type)
        return {
            **plain(done),
            "message": f"Cancelled {scope}: {_jobs_word(done.abandoned)} abandoned now, "
            f"{_jobs_word(done.stopping)} stopping after the current page.",
        }

    @router.post("/api/queues/{queue}/plan", summary="Plan the queue (or one owner) now")
    def plan(queue: str, body: PlanBody) -> dict[str, Any]:
        with _answering() as operations:
            summary = operations.plan(queue, owner=body.owner or None)
        scope = _scope(queue, body.owner, None)
        return {
            **plain(summary),
            "total": summary.total,
            "message": f"Planned {scope}: {_jobs_word(summary.total)} added.",
        }

    return router


def _owner_actions(user_name: Callable[[], Any]) -> APIRouter:
    """Pause and resume an owner, recording who did; set its credentials."""
    router = APIRouter()

    @router.post(
        "/api/queues/{queue}/pause",
        summary="Pause an owner: none of its jobs is taken (a running one stops after its page) until it is resumed",
    )
    def pause(queue: str, body: PauseBody, by: str = user_name()) -> dict[str, Any]:
        with _answering() as operations:
            state = operations.pause(queue, body.owner, body.reason, by=by)
        return {
            **plain(state),
            "message": f"Paused owner {state.owner} of queue {queue} ({state.paused_reason}, by {state.paused_by}): "
            "none of its jobs is taken until it is resumed.",
        }

    @router.post(
        "/api/queues/{queue}/resume",
        summary="Resume a paused owner: its jobs go on from their cursors, what the pause skipped is planned",
    )
    def resume(queue: str, body: ResumeBody) -> dict[str, Any]:
        with _answering() as operations:
            state = operations.resume(queue, body.owner)
        return {
            **plain(state),
            "message": f"Resumed owner {state.owner} of queue {queue}: its jobs go on from their cursors.",
        }

    @router.post(
        "/api/queues/{queue}/credentials",
        summary="Set an owner's credentials (an API key, or OAuth tokens): kept encrypted, answered with their state,"
        " never a value",
    )
    def set_credentials(queue: str, body: CredentialsBody) -> dict[str, Any]:
        if not body.owner:
            raise HTTPException(400, "owner is required: the owner whose credentials these are")
        with _answering() as operations:
            now = operations.at(None) or datetime.now(timezone.utc)
            state = operations.set_credentials(queue, body.owner, body.credentials(now=now), now=now)
        described = state.describe(now)
        return {
            "owner": state.owner,
            "credentials": described,
            "message": f"Credentials of owner {state.owner} of queue {queue} set: {described}.",
        }

    return router


def _resync_actions(user_name: Callable[[], Any]) -> APIRouter:
    """Ask for a re-sync, cancel one, requeue its failures."""
    router = APIRouter()

    @router.post(
        "/api/queues/{queue}/resync",
        summary="Sync a range of one type again, as one request: sliced like history, newest first, after fresh work"
        " (with dry_run: the windows it would make, making nothing)",
    )
    def resync(queue: str, body: ResyncBody, by: str = user_name()) -> dict[str, Any]:
        with _answering() as operations:
            request = operations.resync(
                queue,
                body.type,
                body.start,
                body.end,
                owners=body.owners or None,
                reason=body.reason,
                key=body.key,
                by=by,
                dry_run=body.dry_run,
            )
        who = ", ".join(request.owners) if request.owners is not None else "every owner"
        if request.made:
            message = (
                f"Re-sync {request.key} of queue {queue}: {_jobs_word(request.made)} made for {request.type} of {who}."
            )
        elif not request.windows:
            message = f"Re-sync {request.key} of queue {queue} was asked for already: nothing added."
        else:
            message = f"Re-sync of {request.type} of {who} would make {_jobs_word(request.jobs)}: nothing made yet."
        return {**plain(request), "message": message}

    @router.post(
        "/api/queues/{queue}/resyncs/{key}/cancel",
        summary="Cancel a whole re-sync request: waiting jobs now, running ones after their page",
    )
    def cancel_resync(queue: str, key: str, by: str = user_name()) -> dict[str, Any]:
        with _answering() as operations:
            done = operations.cancel(queue, request=key, by=by)
        return {
            **plain(done),
            "message": f"Cancelled re-sync {key} of queue {queue}: {_jobs_word(done.abandoned)} abandoned now, "
            f"{_jobs_word(done.stopping)} stopping after the current page.",
        }

    @router.post(
        "/api/queues/{queue}/resyncs/{key}/requeue",
        summary="Fresh attempts for a re-sync request's failed jobs, from their cursors",
    )
    def requeue_resync(queue: str, key: str) -> dict[str, Any]:
        with _answering() as operations:
            count = operations.requeue(queue, request=key)
        return {"requeued": count, "message": f"Requeued {_jobs_word(count)} of re-sync {key}: pending, from cursors."}

    return router


def _mounted(request: Request, path: str) -> str:
    """``path`` under the prefix the API server mounted the app at (``/synclane``), as FastAPI's own docs do."""
    return str(request.scope.get("root_path", "")).rstrip("/") + path


def _scope(queue: str, owner: str | None, type: str | None) -> str:
    parts = [f"queue {queue}"] + ([f"owner {owner}"] if owner else []) + ([f"type {type}"] if type else [])
    return "for " + ", ".join(parts)


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()
