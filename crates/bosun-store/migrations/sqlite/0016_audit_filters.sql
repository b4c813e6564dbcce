-- Bosun schema v16: the audit log filtered by actor or by target (who did what,
-- what happened to this stack), newest first, without scanning the whole log.

CREATE INDEX audit_log_actor ON audit_log(org_id, actor, seq);
CREATE INDEX audit_log_target ON audit_log(org_id, target, seq);
