-- 0020 marks: how far each reader that must read every completed job once has read a queue's completions.
--
-- A reader claims the completions since its mark and moves the mark in one statement (see the fragment
-- completed_span in queries.sql), so that each completion is read once however often and however many times at
-- once it runs. Two readers:
--
-- * announced: the assets task's asset events (Operations.announce), every plan interval, so that downstream
--   DAGs learn of new data within a minute or so of the work however long a worker slot runs;
-- * tallied: the owners' records (owners.records, Operations.tally_records, run by the planning task), all of
--   an owner's work counted without reading its history again on every look at the Owners view.
--
-- A person may move a mark back to have a span read again.
CREATE TABLE IF NOT EXISTS {schema}.marks (
    queue       text        NOT NULL,
    purpose     text        NOT NULL CONSTRAINT marks_purpose_is_known CHECK (purpose IN ('announced', 'tallied')),
    reached     timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, purpose)
);

-- How many records the owner's completed jobs stored, all its work (first load, recurring, re-sync, by hand),
-- as far as the tallied mark reaches.
ALTER TABLE {schema}.owners ADD COLUMN IF NOT EXISTS records bigint NOT NULL DEFAULT 0;
