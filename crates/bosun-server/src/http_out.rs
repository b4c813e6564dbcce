//! Reading what another server answered within a size bound: a body is read a chunk at a
//! time and refused as soon as it passes the bound (or says it will), never buffered
//! whole first. Every client of another server (GitHub, identity providers) reads through
//! here.

/// Why a body could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// It is larger than the bound.
    TooLarge,
    Transport(reqwest::Error),
}

/// The body of `reply`, at most `max` bytes.
pub async fn read_bounded(mut reply: reqwest::Response, max: usize) -> Result<Vec<u8>, ReadError> {
    if reply.content_length().is_some_and(|n| n > max as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = reply.chunk().await.map_err(ReadError::Transport)? {
        if body.len() + chunk.len() > max {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
