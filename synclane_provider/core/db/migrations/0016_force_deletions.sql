-- 0016 force deletions: a requeue can let a snapshot's landing delete more of its owner's rows than its share.
--
-- A snapshot that would delete more than its destination's declared share of the owner's rows (or that saw
-- none at all) fails instead; an operator who finds the upstream really did lose those records requeues the
-- job with force, which sets this, and the landing goes ahead. Planned jobs start without it.

ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS force_deletions boolean NOT NULL DEFAULT false;
