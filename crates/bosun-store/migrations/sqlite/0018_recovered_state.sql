-- Bosun schema v18: recovered state versions. A version a runner delivered after its
-- engine could not write it (the engine's `errored.tfstate`) keeps why: NULL for every
-- other version.
ALTER TABLE state_versions ADD COLUMN recovery_reason TEXT;
