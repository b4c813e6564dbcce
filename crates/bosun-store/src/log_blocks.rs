//! Run log blocks: consecutive chunks of an ended run's log packed into one compressed
//! value at rest — their JSON (`[[seq, received_at, phase, text], …]`) compressed with
//! zlib. A block's row keeps its inflated length: inflating reads at most that many bytes
//! and refuses a block that gives more (or less), and no block may claim more than
//! [`MAX_BLOCK_BYTES`], so a corrupt or hostile row costs a bounded amount of memory.

use std::io::{Read, Write};

use chrono::{TimeZone, Utc};

use crate::{LogRecord, Result, StoreError};

/// A block holds consecutive chunks up to about this many bytes of JSON (always at least
/// one chunk), so reading a page inflates a few blocks, never a whole log.
pub(crate) const BLOCK_BYTES: usize = 1024 * 1024;
/// The most a block may inflate to: a block is [`BLOCK_BYTES`] plus at most one chunk, and
/// a chunk came in one request body.
pub(crate) const MAX_BLOCK_BYTES: u64 = 64 * 1024 * 1024;

/// One chunk as a block stores it: seq, when it arrived, the phase that wrote it, text.
type BlockChunk = (i64, Option<i64>, Option<String>, String);

/// A block's body: the chunks' JSON, compressed; and that JSON's length.
pub(crate) fn encode(chunks: &[LogRecord]) -> Result<(Vec<u8>, u64)> {
    let rows: Vec<BlockChunk> = chunks
        .iter()
        .map(|c| {
            (
                c.seq,
                c.at.map(|t| t.timestamp_millis()),
                c.phase.map(|p| p.as_str().to_string()),
                c.text.clone(),
            )
        })
        .collect();
    let json = serde_json::to_vec(&rows).map_err(|e| corrupt("log block", e))?;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&json)
        .and_then(|_| z.finish())
        .map(|body| (body, json.len() as u64))
        .map_err(|e| StoreError::Backend(format!("compressing a log block: {e}")))
}

/// A block's chunks, from its body and the inflated length its row claims.
pub(crate) fn decode(body: &[u8], raw_bytes: u64) -> Result<Vec<LogRecord>> {
    if raw_bytes > MAX_BLOCK_BYTES {
        return Err(corrupt(
            "log block",
            format!("it claims {raw_bytes} bytes inflated, more than the {MAX_BLOCK_BYTES} a block may hold"),
        ));
    }
    let mut json = Vec::new();
    flate2::read::ZlibDecoder::new(body)
        .take(raw_bytes + 1)
        .read_to_end(&mut json)
        .map_err(|e| corrupt("log block", e))?;
    if json.len() as u64 != raw_bytes {
        return Err(corrupt(
            "log block",
            match json.len() as u64 > raw_bytes {
                true => format!("it inflates past its stored length of {raw_bytes} bytes"),
                false => format!(
                    "it inflates to {} bytes, not its stored {raw_bytes}",
                    json.len()
                ),
            },
        ));
    }
    let rows: Vec<BlockChunk> =
        serde_json::from_slice(&json).map_err(|e| corrupt("log block", e))?;
    rows.into_iter()
        .map(|(seq, at, phase, text)| {
            Ok(LogRecord {
                seq,
                text,
                at: at
                    .map(|ms| {
                        Utc.timestamp_millis_opt(ms)
                            .single()
                            .ok_or_else(|| corrupt("log block", format!("time {ms} out of range")))
                    })
                    .transpose()?,
                phase: phase
                    .map(|p| p.parse().map_err(|e| corrupt("log phase", e)))
                    .transpose()?,
            })
        })
        .collect()
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use bosun_core::run::Phase;

    /// A Terraform log as a runner ships it (`-no-color`, chunks of at most 16 KiB or
    /// 200 ms of lines): init, a plan of `n` resources, and an apply with its progress.
    pub(crate) fn terraform_log(n: usize) -> Vec<LogRecord> {
        let mut lines = vec![
            "Initializing the backend...\n".to_string(),
            "Successfully configured the backend \"http\"! Terraform will automatically\n"
                .to_string(),
            "use this backend unless the backend configuration changes.\n".to_string(),
            "Initializing provider plugins...\n".to_string(),
            "- Finding hashicorp/aws versions matching \"~> 5.0\"...\n".to_string(),
            "- Installing hashicorp/aws v5.31.0...\n".to_string(),
            "Terraform has been successfully initialized!\n".to_string(),
        ];
        for i in 0..n {
            lines.push(format!(
                "aws_instance.web[{i}]: Refreshing state... [id=i-0{:015x}]\n",
                i * 7919
            ));
        }
        lines.push("\nTerraform will perform the following actions:\n\n".into());
        for i in 0..n {
            lines.push(format!(
                "  # aws_instance.web[{i}] will be updated in-place\n  ~ resource \"aws_instance\" \"web\" {{\n        id                           = \"i-0{:015x}\"\n      ~ instance_type                = \"t3.micro\" -> \"t3.small\"\n      ~ tags                         = {{\n          ~ \"Release\" = \"2024-11-{:02}\" -> \"2024-12-{:02}\"\n            # (3 unchanged elements hidden)\n        }}\n        # (31 unchanged attributes hidden)\n\n        # (8 unchanged blocks hidden)\n    }}\n\n",
                i * 7919,
                i % 28 + 1,
                i % 28 + 1
            ));
        }
        lines.push(format!("Plan: 0 to add, {n} to change, 0 to destroy.\n"));
        for i in 0..n {
            lines.push(format!(
                "aws_instance.web[{i}]: Modifying... [id=i-0{:015x}]\n",
                i * 7919
            ));
            for s in 1..=(i % 4) {
                lines.push(format!(
                    "aws_instance.web[{i}]: Still modifying... [id=i-0{:015x}, {}s elapsed]\n",
                    i * 7919,
                    s * 10
                ));
            }
            lines.push(format!(
                "aws_instance.web[{i}]: Modifications complete after {}s [id=i-0{:015x}]\n",
                i % 4 * 10 + 3,
                i * 7919
            ));
        }
        lines.push(format!(
            "\nApply complete! Resources: 0 added, {n} changed, 0 destroyed.\n"
        ));
        // Chunks as the runner batches them: up to 16 KiB, and every few lines a flush.
        let mut chunks = Vec::new();
        let mut text = String::new();
        for (i, line) in lines.iter().enumerate() {
            if !text.is_empty() && (text.len() + line.len() > 16 * 1024 || i % 5 == 0) {
                chunks.push(std::mem::take(&mut text));
            }
            text.push_str(line);
        }
        chunks.push(text);
        let t0 = Utc.timestamp_millis_opt(1_733_000_000_000).unwrap();
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, text)| LogRecord {
                seq: i as i64,
                text,
                at: Some(t0 + chrono::Duration::milliseconds(i as i64 * 200)),
                phase: Some(if i < 5 { Phase::Plan } else { Phase::Apply }),
            })
            .collect()
    }

    #[test]
    fn a_block_reads_back_what_was_packed() {
        let mut chunks = terraform_log(3);
        chunks[1].at = None;
        chunks[2].phase = None;
        chunks[3].text = "ünïcödé \u{1b}[0m \"quoted\"\n".into();
        let (body, raw) = encode(&chunks).unwrap();
        assert_eq!(decode(&body, raw).unwrap(), chunks);
        let empty = encode(&[]).unwrap();
        assert_eq!(decode(&empty.0, empty.1).unwrap(), vec![]);
    }

    #[test]
    fn a_terraform_log_shrinks_many_times() {
        let chunks = terraform_log(400);
        let text: usize = chunks.iter().map(|c| c.text.len()).sum();
        let (body, raw) = encode(&chunks).unwrap();
        let ratio = text as f64 / body.len() as f64;
        // Each chunk on its own gives much less: most chunks are a few short lines.
        let one_by_one: usize = chunks
            .iter()
            .map(|c| encode(std::slice::from_ref(c)).unwrap().0.len())
            .sum();
        eprintln!(
            "{} chunks, {text} bytes of text ({raw} as JSON) -> {} bytes as one block \
             ({ratio:.1}x), {one_by_one} bytes chunk by chunk ({:.1}x)",
            chunks.len(),
            body.len(),
            text as f64 / one_by_one as f64
        );
        assert!(ratio > 8.0, "only {ratio:.1}x");
    }

    #[test]
    fn inflating_is_bounded_by_the_stored_length() {
        let chunks = terraform_log(50);
        let (body, raw) = encode(&chunks).unwrap();
        // A row claiming less than the block inflates to is refused, not read past.
        let e = decode(&body, raw - 1).unwrap_err();
        assert!(
            e.to_string().contains("inflates past its stored length"),
            "{e}"
        );
        let e = decode(&body, raw + 1).unwrap_err();
        assert!(e.to_string().contains("not its stored"), "{e}");
        // A bomb: a megabyte of zeros squeezed to a kilobyte, claimed as tiny.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![b'0'; 1024 * 1024]).unwrap();
        let bomb = z.finish().unwrap();
        assert!(bomb.len() < 4096);
        let e = decode(&bomb, 16).unwrap_err();
        assert!(e.to_string().contains("inflates past"), "{e}");
        // No row may claim more than a block holds, whatever it says.
        let e = decode(&body, MAX_BLOCK_BYTES + 1).unwrap_err();
        assert!(e.to_string().contains("more than the"), "{e}");
        // Not zlib, or not chunks: refused as corrupt.
        assert!(matches!(
            decode(b"plain text", 10),
            Err(StoreError::Corrupt(_))
        ));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"{\"not\": \"chunks\"}").unwrap();
        assert!(matches!(
            decode(&z.finish().unwrap(), 17),
            Err(StoreError::Corrupt(_))
        ));
    }
}
