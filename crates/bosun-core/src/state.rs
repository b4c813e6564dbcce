//! State backend rules: parsing a state document, who may touch a stack's state, and the
//! lock, unlock and write decisions — pure functions the store calls inside its
//! transactions, so every writer is judged the same way.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::authz::{Denial, Principal, PrincipalKind};
use crate::Role;

/// What a parsed state document tells us.
#[derive(Debug, Clone, PartialEq)]
pub struct StateDoc {
    pub version: u64,
    pub serial: u64,
    pub lineage: String,
    /// Output name → (value, sensitive).
    pub outputs: BTreeMap<String, Output>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub value: Value,
    pub sensitive: bool,
}

/// The largest serial a state document may carry: what a signed 64-bit column holds.
pub const MAX_SERIAL: u64 = i64::MAX as u64;

/// Why a state document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid state: {0}")]
pub struct InvalidState(pub String);

impl StateDoc {
    /// Parses and checks the fields every Terraform/OpenTofu state has.
    pub fn parse(body: &[u8]) -> Result<Self, InvalidState> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| InvalidState(format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| InvalidState("the document must be a JSON object".into()))?;
        let int = |key: &str| -> Result<u64, InvalidState> {
            obj.get(key)
                .ok_or_else(|| InvalidState(format!("missing \"{key}\"")))?
                .as_u64()
                .ok_or_else(|| InvalidState(format!("\"{key}\" must be a non-negative integer")))
        };
        let version = int("version")?;
        let serial = int("serial")?;
        // The store keeps serials as signed 64-bit integers (SQLite's and PostgreSQL's
        // BIGINT); a larger one is the client's mistake, not a server failure.
        if serial > MAX_SERIAL {
            return Err(InvalidState(format!(
                "\"serial\" is {serial}, above the largest serial a state can have ({MAX_SERIAL})"
            )));
        }
        let lineage = obj
            .get("lineage")
            .ok_or_else(|| InvalidState("missing \"lineage\"".into()))?
            .as_str()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| InvalidState("\"lineage\" must be a non-empty string".into()))?
            .to_string();
        let mut outputs = BTreeMap::new();
        if let Some(outs) = obj.get("outputs") {
            let outs = outs
                .as_object()
                .ok_or_else(|| InvalidState("\"outputs\" must be an object".into()))?;
            for (name, o) in outs {
                outputs.insert(
                    name.clone(),
                    Output {
                        value: o.get("value").cloned().unwrap_or(Value::Null),
                        sensitive: o.get("sensitive").and_then(Value::as_bool).unwrap_or(false),
                    },
                );
            }
        }
        Ok(StateDoc {
            version,
            serial,
            lineage,
            outputs,
        })
    }
}

/// Who holds a lock or wrote a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writer {
    User(String),
    Run(String),
}

impl Writer {
    pub fn kind(&self) -> &'static str {
        match self {
            Writer::User(_) => "user",
            Writer::Run(_) => "run",
        }
    }

    pub fn id(&self) -> &str {
        match self {
            Writer::User(id) | Writer::Run(id) => id,
        }
    }

    pub fn from_parts(kind: &str, id: String) -> Option<Self> {
        match kind {
            "user" => Some(Writer::User(id)),
            "run" => Some(Writer::Run(id)),
            _ => None,
        }
    }
}

/// A held state lock: the client's lock info plus who holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lock {
    pub id: String,
    pub operation: String,
    pub info: String,
    pub who: String,
    pub version: String,
    pub created: String,
    pub path: String,
    pub holder: Writer,
    pub acquired_at: DateTime<Utc>,
}

/// The latest version a write is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    pub serial: u64,
    pub lineage: String,
}

/// Whether the writer is still allowed to be writing: a person, a Run still executing,
/// or a Run that has ended (force-failed, interrupted) — whose writes are late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterLiveness {
    Person,
    LiveRun,
    EndedRun,
    /// The state a run's engine could not write (its `errored.tfstate`), delivered by the
    /// runner afterwards, whether the run has ended or not.
    Recovery,
}

/// A request to store a new version.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteRequest {
    pub writer: Writer,
    pub liveness: WriterLiveness,
    /// The `?ID=` the client sent (the lock it believes it holds).
    pub lock_id: Option<String>,
    /// An admin override of the serial and lineage checks.
    pub force: bool,
}

/// How a write is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Becomes the stack's current version.
    pub current: bool,
    /// Written by a Run that had already ended: stored, and flagged loudly.
    pub late_write: bool,
    /// Recovered from an engine that could not write it: stored, and flagged.
    pub recovered: bool,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteRefusal {
    #[error("the state is locked by {} (lock {})", .0.who, .0.id)]
    Locked(Box<Lock>),
    #[error("lock {0:?} is not held; lock the state before writing")]
    LockNotHeld(String),
    #[error("serial {new} is lower than the current serial {current}; an admin can force it")]
    SerialBackwards { new: u64, current: u64 },
    #[error("lineage {new:?} differs from the current lineage {current:?}; an admin can force it")]
    LineageChanged { new: String, current: String },
}

/// Decides whether and how a new version is stored.
///
/// A late write (from an ended Run) is never refused: it is what happened to the
/// infrastructure. It becomes current only if nobody else holds the lock; otherwise it is
/// kept as a flagged, non-current version, so nothing is lost and nothing is clobbered.
pub fn decide_write(
    req: &WriteRequest,
    lock: Option<&Lock>,
    current: Option<&Current>,
    doc: &StateDoc,
) -> Result<WriteOutcome, WriteRefusal> {
    let someone_else_holds = lock.is_some_and(|l| l.holder != req.writer);
    if req.liveness == WriterLiveness::EndedRun {
        return Ok(WriteOutcome {
            current: !someone_else_holds,
            late_write: true,
            recovered: false,
        });
    }
    // A recovered state is never refused either: the resources it records exist. It
    // becomes current only where the run's own write would have: nobody else holds the
    // lock and it follows the current version (same lineage, serial not behind) — else it
    // is kept beside it, flagged, for a person to look at.
    if req.liveness == WriterLiveness::Recovery {
        let follows =
            current.is_none_or(|cur| doc.lineage == cur.lineage && doc.serial >= cur.serial);
        return Ok(WriteOutcome {
            current: !someone_else_holds && follows,
            late_write: false,
            recovered: true,
        });
    }
    match (lock, &req.lock_id) {
        (Some(l), Some(id)) if *id == l.id => {}
        (Some(l), _) => return Err(WriteRefusal::Locked(Box::new(l.clone()))),
        (None, Some(id)) => return Err(WriteRefusal::LockNotHeld(id.clone())),
        (None, None) => {}
    }
    if let (Some(cur), false) = (current, req.force) {
        if doc.lineage != cur.lineage {
            return Err(WriteRefusal::LineageChanged {
                new: doc.lineage.clone(),
                current: cur.lineage.clone(),
            });
        }
        if doc.serial < cur.serial {
            return Err(WriteRefusal::SerialBackwards {
                new: doc.serial,
                current: cur.serial,
            });
        }
    }
    Ok(WriteOutcome {
        current: true,
        late_write: false,
        recovered: false,
    })
}

/// Decides a LOCK: granted when the state is free, refused with the holder otherwise.
/// Re-locking with the same ID by the same holder is idempotent.
pub fn decide_lock(held: Option<&Lock>, requested: &Lock) -> Result<(), Box<Lock>> {
    match held {
        None => Ok(()),
        Some(l) if l.id == requested.id && l.holder == requested.holder => Ok(()),
        Some(l) => Err(Box::new(l.clone())),
    }
}

/// An UNLOCK request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnlockRequest {
    /// The client names the lock it holds (a normal unlock).
    Holder { id: String },
    /// Release a named lock whoever holds it (`bosun state force-unlock`, console).
    Force { id: String },
    /// An empty UNLOCK body: what `terraform force-unlock` sends. Releases any lock.
    ForceAny,
}

#[derive(Debug, Clone, PartialEq)]
pub enum UnlockDecision {
    /// Release the lock; `forced` when the caller was not its holder's own unlock.
    Release {
        lock: Box<Lock>,
        forced: bool,
    },
    NotLocked,
    Mismatch(Box<Lock>),
}

pub fn decide_unlock(held: Option<&Lock>, req: &UnlockRequest) -> UnlockDecision {
    let Some(l) = held else {
        return UnlockDecision::NotLocked;
    };
    let release = |forced| UnlockDecision::Release {
        lock: Box::new(l.clone()),
        forced,
    };
    match req {
        UnlockRequest::Holder { id } if *id == l.id => release(false),
        UnlockRequest::Force { id } if *id == l.id => release(true),
        UnlockRequest::ForceAny => release(true),
        _ => UnlockDecision::Mismatch(Box::new(l.clone())),
    }
}

/// How a state route names its operation: by the HTTP method (the backend protocol's
/// one URL) or fixed (the JSON API's routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateAccess {
    /// GET reads, POST writes, LOCK locks, UNLOCK unlocks.
    ByMethod,
    Op(StateOp),
}

impl StateAccess {
    pub fn op(self, method: &str) -> Option<StateOp> {
        match (self, method) {
            (StateAccess::Op(op), _) => Some(op),
            (StateAccess::ByMethod, "GET" | "HEAD") => Some(StateOp::Read),
            (StateAccess::ByMethod, "POST") => Some(StateOp::Write),
            (StateAccess::ByMethod, "LOCK") => Some(StateOp::Lock),
            (StateAccess::ByMethod, "UNLOCK") => Some(StateOp::Unlock),
            _ => None,
        }
    }
}

/// What a caller wants to do with a stack's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateOp {
    Read,
    Write,
    Lock,
    Unlock,
    /// Release another writer's lock.
    ForceUnlock,
}

/// Who may touch a stack's state. Personal tokens by role: viewers read, operators and
/// admins write, lock, unlock and force-unlock. A run token reads and writes its own
/// stack's state (never force-unlocks), and reads upstream stacks it was granted.
pub fn authorize_state(who: &Principal, op: StateOp, org: &str, stack: &str) -> Result<(), Denial> {
    match &who.kind {
        PrincipalKind::User { roles, .. } => {
            let needs = if op == StateOp::Read {
                Role::Viewer
            } else {
                Role::Operator
            };
            match roles.get(org) {
                None => Err(Denial::NotMember { org: org.into() }),
                Some(has) if *has >= needs => Ok(()),
                Some(has) => Err(Denial::RoleTooLow {
                    org: org.into(),
                    has: *has,
                    needs,
                }),
            }
        }
        PrincipalKind::Run {
            org: run_org,
            stack: own,
            read_stacks,
            ..
        } => {
            let scope = |reason: String| Err(Denial::OutOfScope { reason });
            if run_org != org {
                return scope(format!(
                    "a run token of org {run_org:?} cannot reach org {org:?}"
                ));
            }
            if own == stack {
                return match op {
                    StateOp::ForceUnlock => {
                        scope("a run token cannot force-unlock another writer's lock".into())
                    }
                    _ => Ok(()),
                };
            }
            if op == StateOp::Read && read_stacks.iter().any(|g| g == stack) {
                return Ok(());
            }
            scope(format!(
                "a run token of stack {own:?} may not {} the state of stack {stack:?}{}",
                match op {
                    StateOp::Read => "read",
                    _ => "change",
                },
                if op == StateOp::Read {
                    " without a dependency grant"
                } else {
                    ""
                }
            ))
        }
        PrincipalKind::Pool { .. } => Err(Denial::WrongTokenKind {
            kind: who.token_kind(),
            needs: "a personal token or the run's own token",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(id: &str, holder: Writer) -> Lock {
        Lock {
            id: id.into(),
            operation: "OperationTypeApply".into(),
            info: String::new(),
            who: "alice@laptop".into(),
            version: "1.0.3".into(),
            created: "2026-11-30T00:00:00Z".into(),
            path: String::new(),
            holder,
            acquired_at: Utc::now(),
        }
    }

    fn doc(serial: u64, lineage: &str) -> StateDoc {
        StateDoc {
            version: 4,
            serial,
            lineage: lineage.into(),
            outputs: BTreeMap::new(),
        }
    }

    fn req(writer: Writer, liveness: WriterLiveness, lock_id: Option<&str>) -> WriteRequest {
        WriteRequest {
            writer,
            liveness,
            lock_id: lock_id.map(str::to_string),
            force: false,
        }
    }

    #[test]
    fn parses_state_documents() {
        let d = StateDoc::parse(
            br#"{"version":4,"serial":7,"lineage":"abc","outputs":{"x":{"value":1,"type":"number"},"s":{"value":"p","sensitive":true}}}"#,
        )
        .unwrap();
        assert_eq!((d.version, d.serial, d.lineage.as_str()), (4, 7, "abc"));
        assert!(d.outputs["s"].sensitive && !d.outputs["x"].sensitive);
        for bad in [
            &b"nope"[..],
            b"[]",
            br#"{"serial":1,"lineage":"a"}"#,
            br#"{"version":4,"lineage":"a"}"#,
            br#"{"version":4,"serial":-1,"lineage":"a"}"#,
            br#"{"version":4,"serial":1}"#,
            br#"{"version":4,"serial":1,"lineage":""}"#,
            br#"{"version":4,"serial":1,"lineage":"a","outputs":[]}"#,
        ] {
            assert!(
                StateDoc::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn serials_beyond_what_the_store_keeps_are_refused_naming_the_field() {
        let doc = |serial: &str| format!(r#"{{"version":4,"serial":{serial},"lineage":"a"}}"#);
        let top = StateDoc::parse(doc(&MAX_SERIAL.to_string()).as_bytes()).unwrap();
        assert_eq!(top.serial, MAX_SERIAL);
        for serial in [
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
        ] {
            let e = StateDoc::parse(doc(serial).as_bytes()).unwrap_err();
            assert!(e.0.contains("\"serial\""), "{serial}: {e}");
        }
    }

    #[test]
    fn writes_follow_the_lock() {
        let alice = Writer::User("alice".into());
        let run = Writer::Run("r1".into());
        let held = lock("L1", alice.clone());
        let cur = Current {
            serial: 5,
            lineage: "abc".into(),
        };
        // The holder writes with its lock id.
        let ok = decide_write(
            &req(alice.clone(), WriterLiveness::Person, Some("L1")),
            Some(&held),
            Some(&cur),
            &doc(6, "abc"),
        );
        assert_eq!(
            ok,
            Ok(WriteOutcome {
                current: true,
                late_write: false,
                recovered: false
            })
        );
        // Anyone else — or the holder without the id — is refused with the holder.
        for r in [
            req(run.clone(), WriterLiveness::LiveRun, None),
            req(run.clone(), WriterLiveness::LiveRun, Some("L2")),
            req(alice.clone(), WriterLiveness::Person, None),
        ] {
            assert!(
                matches!(decide_write(&r, Some(&held), Some(&cur), &doc(6, "abc")), Err(WriteRefusal::Locked(l)) if l.id == "L1")
            );
        }
        // A stale lock id after the lock is gone is refused, not silently accepted.
        assert_eq!(
            decide_write(
                &req(alice.clone(), WriterLiveness::Person, Some("L1")),
                None,
                Some(&cur),
                &doc(6, "abc")
            ),
            Err(WriteRefusal::LockNotHeld("L1".into()))
        );
        // Unlocked writes are fine.
        assert!(decide_write(
            &req(alice, WriterLiveness::Person, None),
            None,
            None,
            &doc(0, "x")
        )
        .is_ok());
    }

    #[test]
    fn serial_and_lineage_guard_unless_forced() {
        let w = req(Writer::User("a".into()), WriterLiveness::Person, None);
        let cur = Current {
            serial: 5,
            lineage: "abc".into(),
        };
        assert!(matches!(
            decide_write(&w, None, Some(&cur), &doc(4, "abc")),
            Err(WriteRefusal::SerialBackwards { new: 4, current: 5 })
        ));
        assert!(matches!(
            decide_write(&w, None, Some(&cur), &doc(9, "zzz")),
            Err(WriteRefusal::LineageChanged { .. })
        ));
        assert!(
            decide_write(&w, None, Some(&cur), &doc(5, "abc")).is_ok(),
            "equal serial is not backwards"
        );
        let forced = WriteRequest { force: true, ..w };
        assert!(decide_write(&forced, None, Some(&cur), &doc(1, "zzz")).is_ok());
    }

    #[test]
    fn late_writes_are_kept_and_flagged() {
        let run = Writer::Run("r1".into());
        let late = req(run.clone(), WriterLiveness::EndedRun, Some("L-old"));
        let cur = Current {
            serial: 9,
            lineage: "abc".into(),
        };
        // Nobody holds the lock: it becomes current (it is what happened), flagged.
        assert_eq!(
            decide_write(&late, None, Some(&cur), &doc(3, "abc")),
            Ok(WriteOutcome {
                current: true,
                late_write: true,
                recovered: false
            })
        );
        // Someone else holds the lock: kept, flagged, not current.
        let other = lock("L2", Writer::User("bob".into()));
        assert_eq!(
            decide_write(&late, Some(&other), Some(&cur), &doc(10, "abc")),
            Ok(WriteOutcome {
                current: false,
                late_write: true,
                recovered: false
            })
        );
        // The ended run still holds its own lock (not yet released): current, flagged.
        let own = lock("L-old", run);
        assert_eq!(
            decide_write(&late, Some(&own), Some(&cur), &doc(10, "abc")),
            Ok(WriteOutcome {
                current: true,
                late_write: true,
                recovered: false
            })
        );
    }

    #[test]
    fn recovered_states_are_kept_and_current_only_where_they_follow() {
        let run = Writer::Run("r1".into());
        let rec = req(run.clone(), WriterLiveness::Recovery, None);
        let cur = Current {
            serial: 9,
            lineage: "abc".into(),
        };
        let outcome = |current| {
            Ok(WriteOutcome {
                current,
                late_write: false,
                recovered: true,
            })
        };
        // First state of the stack, or the next serial of its lineage: current.
        assert_eq!(
            decide_write(&rec, None, None, &doc(1, "abc")),
            outcome(true)
        );
        assert_eq!(
            decide_write(&rec, None, Some(&cur), &doc(10, "abc")),
            outcome(true)
        );
        // The run's own lock, still held after its unlock failed too: current.
        let own = lock("L1", run);
        assert_eq!(
            decide_write(&rec, Some(&own), Some(&cur), &doc(10, "abc")),
            outcome(true)
        );
        // Someone else's lock, an older serial or another lineage: kept beside, never
        // refused.
        let other = lock("L2", Writer::User("bob".into()));
        assert_eq!(
            decide_write(&rec, Some(&other), Some(&cur), &doc(10, "abc")),
            outcome(false)
        );
        assert_eq!(
            decide_write(&rec, None, Some(&cur), &doc(8, "abc")),
            outcome(false)
        );
        assert_eq!(
            decide_write(&rec, None, Some(&cur), &doc(10, "zzz")),
            outcome(false)
        );
    }

    #[test]
    fn lock_and_unlock_decisions() {
        let a = lock("L1", Writer::User("alice".into()));
        let b = lock("L2", Writer::Run("r".into()));
        assert!(decide_lock(None, &a).is_ok());
        assert!(
            decide_lock(Some(&a), &a).is_ok(),
            "same holder, same id: idempotent"
        );
        assert_eq!(decide_lock(Some(&a), &b).unwrap_err().id, "L1");

        assert_eq!(
            decide_unlock(None, &UnlockRequest::ForceAny),
            UnlockDecision::NotLocked
        );
        assert!(matches!(
            decide_unlock(Some(&a), &UnlockRequest::Holder { id: "L1".into() }),
            UnlockDecision::Release { forced: false, .. }
        ));
        assert!(
            matches!(decide_unlock(Some(&a), &UnlockRequest::Holder { id: "L9".into() }), UnlockDecision::Mismatch(l) if l.id == "L1")
        );
        assert!(matches!(
            decide_unlock(Some(&a), &UnlockRequest::Force { id: "L1".into() }),
            UnlockDecision::Release { forced: true, .. }
        ));
        assert!(matches!(
            decide_unlock(Some(&a), &UnlockRequest::Force { id: "L9".into() }),
            UnlockDecision::Mismatch(_)
        ));
        assert!(matches!(
            decide_unlock(Some(&a), &UnlockRequest::ForceAny),
            UnlockDecision::Release { forced: true, .. }
        ));
    }

    #[test]
    fn state_authorization_matrix() {
        let user = |role: Option<Role>| Principal {
            token_id: "t".into(),
            kind: PrincipalKind::User {
                user: "u".into(),
                server_admin: false,
                roles: role
                    .map(|r| BTreeMap::from([("acme".to_string(), r)]))
                    .unwrap_or_default(),
            },
        };
        let ops = [
            StateOp::Read,
            StateOp::Write,
            StateOp::Lock,
            StateOp::Unlock,
            StateOp::ForceUnlock,
        ];
        for role in [
            None,
            Some(Role::Viewer),
            Some(Role::Operator),
            Some(Role::Admin),
        ] {
            for op in ops {
                let allowed = match role {
                    None => false,
                    Some(Role::Viewer) => op == StateOp::Read,
                    Some(_) => true,
                };
                assert_eq!(
                    authorize_state(&user(role), op, "acme", "net").is_ok(),
                    allowed,
                    "{role:?} {op:?}"
                );
            }
        }
        let run = Principal {
            token_id: "t".into(),
            kind: PrincipalKind::Run {
                org: "acme".into(),
                run: "r1".into(),
                stack: "app".into(),
                read_stacks: vec!["net".to_string()],
            },
        };
        for op in ops {
            assert_eq!(
                authorize_state(&run, op, "acme", "app").is_ok(),
                op != StateOp::ForceUnlock,
                "own {op:?}"
            );
            assert_eq!(
                authorize_state(&run, op, "acme", "net").is_ok(),
                op == StateOp::Read,
                "granted {op:?}"
            );
            assert!(
                authorize_state(&run, op, "acme", "db").is_err(),
                "ungranted {op:?}"
            );
            assert!(
                authorize_state(&run, op, "other", "app").is_err(),
                "other org {op:?}"
            );
        }
        let pool = Principal {
            token_id: "t".into(),
            kind: PrincipalKind::Pool {
                org: Some("acme".into()),
                pool: "p".into(),
            },
        };
        assert!(authorize_state(&pool, StateOp::Read, "acme", "app").is_err());
    }
}
