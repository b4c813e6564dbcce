//! Run logs at rest, for stack runs and plan runs alike: chunks stored as they arrive, one
//! row each, and — once the run has ended — packed by retention into compressed blocks of
//! consecutive chunks (`crate::log_blocks`). Every read takes both as one sequence (a
//! block's chunks win over a row of the same seq), so rows written before blocks existed
//! keep reading.

use crate::log_blocks::{self, BLOCK_BYTES, MAX_BLOCK_BYTES};

use super::*;

/// Whose log: the tables a kind of run keeps its chunks and blocks in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum LogOf {
    StackRun,
    PlanRun,
}

impl LogOf {
    fn rows(self) -> &'static str {
        match self {
            LogOf::StackRun => "run_logs",
            LogOf::PlanRun => "plan_run_logs",
        }
    }

    fn blocks(self) -> &'static str {
        match self {
            LogOf::StackRun => "run_log_blocks",
            LogOf::PlanRun => "plan_run_log_blocks",
        }
    }

    /// The table of the runs themselves.
    fn runs(self) -> &'static str {
        match self {
            LogOf::StackRun => "runs",
            LogOf::PlanRun => "plan_runs",
        }
    }

    /// The phase column of a chunk row (plan runs have none).
    fn phase(self) -> &'static str {
        match self {
            LogOf::StackRun => "phase",
            LogOf::PlanRun => "NULL",
        }
    }
}

/// Stores chunks stamped `now` (and, for a stack run, with the phase it is in); a seq
/// already stored — as a row or in a block — keeps its first text, and a summarised run
/// takes none.
pub(crate) fn append(
    tx: &Transaction<'_>,
    of: LogOf,
    id: &str,
    chunks: &[(i64, String)],
    now: i64,
) -> Result<()> {
    let phase = match of {
        LogOf::StackRun => "(SELECT phase FROM runs WHERE id = ?1)",
        LogOf::PlanRun => "NULL",
    };
    let columns = match of {
        LogOf::StackRun => "run_id, seq, text, received_at, phase",
        LogOf::PlanRun => "run_id, seq, text, received_at",
    };
    let values = match of {
        LogOf::StackRun => format!("?1, ?2, ?3, ?4, {phase}"),
        LogOf::PlanRun => "?1, ?2, ?3, ?4".to_string(),
    };
    // A run summarised by retention has no log any more: nothing is added to it.
    let kept = format!(
        "AND NOT EXISTS (SELECT 1 FROM {runs} WHERE id = ?1 AND summarised_at IS NOT NULL)",
        runs = of.runs()
    );
    let mut insert = tx.prepare_cached(&format!(
        "INSERT OR IGNORE INTO {rows} ({columns})
         SELECT {values} WHERE NOT EXISTS (
             SELECT 1 FROM {blocks} WHERE run_id = ?1 AND first_seq <= ?2 AND last_seq >= ?2)
         {kept}",
        rows = of.rows(),
        blocks = of.blocks(),
    ))?;
    for (seq, text) in chunks {
        insert.execute(params![id, seq, text, now])?;
    }
    Ok(())
}

/// Reads the chunks of a row query.
fn read_rows(conn: &Connection, sql: &str, args: &[&dyn db::ToSql]) -> Result<Vec<LogRecord>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    rows.map(|row| {
        let (seq, text, at, phase): (i64, String, Option<i64>, Option<String>) = row?;
        Ok(LogRecord {
            seq,
            text,
            at: opt_from_millis(at)?,
            phase: phase
                .map(|p| p.parse().map_err(|e| corrupt("log phase", e)))
                .transpose()?,
        })
    })
    .collect()
}

/// At most `limit` chunks after `after`, in seq order, from rows and blocks together.
pub(crate) fn read(
    conn: &Connection,
    of: LogOf,
    id: &str,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<LogRecord>> {
    let after = after.unwrap_or(-1);
    let rows = read_rows(
        conn,
        &format!(
            "SELECT seq, text, received_at, {phase} FROM {rows}
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            phase = of.phase(),
            rows = of.rows(),
        ),
        params![id, after, limit],
    )?;
    // Blocks in seq order, each read and inflated only while fewer than `limit` chunks
    // were found.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT first_seq FROM {} WHERE run_id = ?1 AND last_seq > ?2
         ORDER BY first_seq LIMIT ?3",
        of.blocks()
    ))?;
    let starts: Vec<i64> = stmt
        .query_map(params![id, after, limit], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    // A page of rows already full ends where its last row is: blocks past it are not read.
    let full = (rows.len() == limit as usize)
        .then(|| rows.last().map(|c| c.seq))
        .flatten();
    let mut packed: Vec<LogRecord> = Vec::new();
    for first_seq in starts {
        if packed.len() >= limit as usize || full.is_some_and(|last| first_seq > last) {
            break;
        }
        let (raw_bytes, body): (i64, Vec<u8>) = conn
            .prepare_cached(&format!(
                "SELECT raw_bytes, body FROM {} WHERE run_id = ?1 AND first_seq = ?2",
                of.blocks()
            ))?
            .query_row(params![id, first_seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let raw_bytes = u64::try_from(raw_bytes).map_err(|e| corrupt("log block length", e))?;
        packed.extend(
            log_blocks::decode(&body, raw_bytes)?
                .into_iter()
                .filter(|c| c.seq > after),
        );
    }
    // Merged by seq; where both hold one, the block's (written first) wins.
    let mut merged: BTreeMap<i64, LogRecord> = rows.into_iter().map(|c| (c.seq, c)).collect();
    merged.extend(packed.into_iter().map(|c| (c.seq, c)));
    Ok(merged.into_values().take(limit as usize).collect())
}

/// The next seq to write: one past the highest stored, as a row or in a block.
pub(crate) fn next_seq(conn: &Connection, of: LogOf, id: &str) -> Result<i64> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT COALESCE(MAX(seq), -1) + 1 FROM (
                 SELECT MAX(seq) AS seq FROM {rows} WHERE run_id = ?1
                 UNION ALL SELECT MAX(last_seq) FROM {blocks} WHERE run_id = ?1) s",
            rows = of.rows(),
            blocks = of.blocks(),
        ))?
        .query_row([id], |r| r.get(0))?)
}

/// Runs ended before `ended_before` with chunks still stored as rows — the ones to pack —
/// in id order after `after` (a cursor: each batch goes on where the last one stopped).
pub(crate) fn ended_with_rows(
    conn: &Connection,
    of: LogOf,
    ended_before: i64,
    after: &str,
    limit: u32,
) -> Result<Vec<String>> {
    // Found from the chunk rows, which hold only logs not packed yet (runs open or ended
    // minutes ago), never by reading every run of the store.
    let ended = match of {
        LogOf::StackRun => format!("r.state IN {TERMINAL_STATES} AND r.updated_at < ?1"),
        LogOf::PlanRun => "r.ended_at < ?1".to_string(),
    };
    let (logs, runs) = (of.rows(), of.runs());
    let sql = format!(
        "SELECT r.id FROM (SELECT DISTINCT run_id FROM {logs} WHERE run_id > ?2) l
         JOIN {runs} r ON r.id = l.run_id
         WHERE {ended} ORDER BY r.id LIMIT ?3"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![ended_before, after, limit], |r| r.get(0))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row?);
    }
    Ok(out)
}

/// Packs up to `batch` of a run's oldest chunk rows into blocks of consecutive seqs (a
/// block ends at a gap, or past [`BLOCK_BYTES`] of text) and deletes the rows packed; how
/// many went. A block that would inflate past [`MAX_BLOCK_BYTES`] (one huge chunk of
/// escapes) is not written: its rows stay rows, read as ever.
pub(crate) fn pack(tx: &Transaction<'_>, of: LogOf, id: &str, batch: u32) -> Result<u64> {
    let chunks = read_rows(
        tx,
        &format!(
            "SELECT seq, text, received_at, {phase} FROM {rows}
             WHERE run_id = ?1 ORDER BY seq LIMIT ?2",
            phase = of.phase(),
            rows = of.rows(),
        ),
        params![id, batch],
    )?;
    let mut insert = tx.prepare_cached(&format!(
        "INSERT INTO {} (run_id, first_seq, last_seq, chunks, raw_bytes, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        of.blocks()
    ))?;
    let mut delete = tx.prepare_cached(&format!(
        "DELETE FROM {} WHERE run_id = ?1 AND seq >= ?2 AND seq <= ?3",
        of.rows()
    ))?;
    let (mut start, mut bytes, mut packed) = (0, 0, 0);
    for i in 0..chunks.len() {
        bytes += chunks[i].text.len();
        let end = i + 1 == chunks.len()
            || chunks[i + 1].seq != chunks[i].seq + 1
            || bytes + chunks[i + 1].text.len() > BLOCK_BYTES;
        if !end {
            continue;
        }
        let block = &chunks[start..=i];
        let (first, last) = (block[0].seq, chunks[i].seq);
        let (body, raw_bytes) = log_blocks::encode(block)?;
        if raw_bytes <= MAX_BLOCK_BYTES {
            insert.execute(params![
                id,
                first,
                last,
                block.len() as i64,
                raw_bytes as i64,
                body
            ])?;
            packed += delete.execute(params![id, first, last])? as u64;
        }
        start = i + 1;
        bytes = 0;
    }
    Ok(packed)
}

/// Deletes a run's whole log, rows and blocks; how many rows and blocks went.
pub(crate) fn delete(tx: &Transaction<'_>, of: LogOf, id: &str) -> Result<u64> {
    let mut n = 0;
    for table in [of.rows(), of.blocks()] {
        n += tx
            .prepare_cached(&format!("DELETE FROM {table} WHERE run_id = ?1"))?
            .execute([id])? as u64;
    }
    Ok(n)
}
