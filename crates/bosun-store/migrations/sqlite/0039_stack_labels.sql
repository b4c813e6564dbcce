-- Bosun schema v39: a stack carries labels (slugs, each once, at most 32), for what
-- selects stacks by label. A JSON array of strings, like a host's labels; every stack
-- there before has none.
ALTER TABLE stacks ADD COLUMN labels TEXT NOT NULL DEFAULT '[]';
