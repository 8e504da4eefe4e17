//! The latency floor's disk part: how long one WAL-sized write and `fdatasync` take in the
//! bench Postgres' data directory (`fdatasync` is Postgres' `wal_sync_method` on Linux).
//! A first-time request waits for two of them, its claim's commit and its finalize's.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::BenchError;

/// One WAL page.
const WRITE_BYTES: usize = 8192;

/// The median of `writes` 8 kB overwrites of one file in `dir`, each followed by
/// `fdatasync`, as Postgres flushes a WAL segment it has already allocated.
pub fn median_flush(dir: &Path, writes: usize) -> Result<Duration, BenchError> {
    let path = dir.join("keyflight-bench-fsync");
    let context = |what: &str| format!("{what} {}", path.display());
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(BenchError::io(context("create")))?;
    let page = vec![0x5a_u8; WRITE_BYTES];
    file.write_all(&page)
        .and_then(|()| file.sync_all())
        .map_err(BenchError::io(context("write")))?;
    let mut flushes = Vec::with_capacity(writes);
    for _ in 0..writes.max(1) {
        let started = Instant::now();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&page))
            .and_then(|()| file.sync_data())
            .map_err(BenchError::io(context("flush")))?;
        flushes.push(started.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    flushes.sort();
    Ok(flushes[flushes.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_is_measured_and_its_file_removed() {
        let dir = std::env::temp_dir().join(format!("keyflight-fsync-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        median_flush(&dir, 3).expect("flushes");
        assert!(!dir.join("keyflight-bench-fsync").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
