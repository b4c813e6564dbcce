//! Run logs as the API serves them, for stack runs and plan runs alike: the page query,
//! a page of chunks, and the live stream (server-sent events).

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use bosun_api::LogChunk;
use bosun_store::LogRecord;
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Chunks after this seq.
    pub after: Option<i64>,
    /// At most this many chunks (1–1000, default 1000).
    pub limit: Option<u32>,
}

/// A page of log chunks (stack or plan run) as the API answers it.
pub fn log_page(chunks: Vec<LogRecord>) -> Vec<LogChunk> {
    chunks.into_iter().map(log_chunk).collect()
}

/// One stored chunk as the API (and the stream) shows it.
fn log_chunk(c: LogRecord) -> LogChunk {
    LogChunk {
        seq: c.seq,
        text: c.text,
        at: c.at,
        phase: c.phase.map(|p| p.to_string()),
    }
}

/// Where a run whose log is streamed stands.
pub(crate) enum RunProgress {
    /// Deleted: the stream stops.
    Gone,
    Going,
    /// Ended for good (its last log lines are in): its final state.
    Ended(&'static str),
}

/// A run's log as server-sent events, for stack runs and plan runs alike: `chunk` events
/// carrying a LogChunk (after `after`), then an `end` event with the run's final state
/// once `progress` says it ended and every chunk was sent. `read` gives the chunks after
/// a seq. Looks again when the store signals `Run(run)` (new chunks or a state change,
/// written through any replica), and at least every 2 s; stops when the client goes, the
/// run is gone, a store call fails, or the server shuts down.
pub(crate) fn log_stream<P, PF, R, RF>(
    state: AppState,
    run: String,
    mut after: Option<i64>,
    progress: P,
    read: R,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>>
where
    P: Fn(AppState) -> PF + Send + 'static,
    PF: std::future::Future<Output = Result<RunProgress, bosun_store::StoreError>> + Send,
    R: Fn(AppState, Option<i64>) -> RF + Send + 'static,
    RF: std::future::Future<Output = Result<Vec<LogRecord>, bosun_store::StoreError>> + Send,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    tokio::spawn(async move {
        let mut stopping = state.stopping.subscribe();
        // Subscribed before the first look, so nothing written after it is missed.
        let mut signals = state.store.subscribe();
        loop {
            let ended = match progress(state.clone()).await {
                Ok(RunProgress::Going) => None,
                Ok(RunProgress::Ended(s)) => Some(s),
                Ok(RunProgress::Gone) | Err(_) => return,
            };
            let Ok(chunks) = read(state.clone(), after).await else {
                return;
            };
            let drained = chunks.is_empty();
            for chunk in chunks {
                after = Some(chunk.seq);
                let Ok(data) = serde_json::to_string(&log_chunk(chunk)) else {
                    return;
                };
                if tx
                    .send(SseEvent::default().event("chunk").data(data))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if let (Some(s), true) = (ended, drained) {
                let _ = tx
                    .send(
                        SseEvent::default()
                            .event("end")
                            .data(json!({"state": s}).to_string()),
                    )
                    .await;
                return;
            }
            if !drained {
                // A page was sent: there may be more at once.
                continue;
            }
            let heard = async {
                while !bosun_store::signal::next(&mut signals)
                    .await
                    .concerns_run(&run)
                {}
            };
            tokio::select! {
                _ = heard => {}
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = crate::duties::stopped(&mut stopping) => return,
            }
        }
    });
    let stream =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
        );
    Sse::new(stream).keep_alive(KeepAlive::default())
}
