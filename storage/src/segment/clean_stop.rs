//! The clean-stop state of the active segment (`clean_path`): what a clean
//! stop (`PartitionLog::close`) leaves so the next start loads the segment
//! instead of scanning it; written, parsed and checked, and taken (removed
//! durably) at open so it is never trusted twice.

use super::paths::{clean_path, log_path};
use super::seal::SegmentIndexes;
use super::Segment;
use crate::durable::sync_dir_in_ring;
use crate::index::{OffsetIndex, TimeIndex};
use crate::producer_state::ProducerStates;
use crate::StorageError;

/// The first bytes of a clean-stop state file (its format's version).
const CLEAN_MAGIC: &[u8; 8] = b"weirCLN1";

/// What a clean-stop state file records: what index files would, and the
/// partition's producers.
pub(super) struct CleanState {
    pub(super) indexes: SegmentIndexes,
    pub(super) producers: ProducerStates,
}

impl CleanState {
    /// Parses and checks a state file: its CRC-32C, every part whole.
    fn parse(b: &[u8]) -> Option<CleanState> {
        let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
        if crc32c::crc32c(body).to_be_bytes() != crc[..] || !body.starts_with(CLEAN_MAGIC) {
            return None;
        }
        let mut at = CLEAN_MAGIC.len();
        fn word(body: &[u8], at: &mut usize) -> Option<[u8; 8]> {
            let w = body.get(*at..*at + 8)?.try_into().ok()?;
            *at += 8;
            Some(w)
        }
        let size = u64::from_be_bytes(word(body, &mut at)?);
        let next_offset = i64::from_be_bytes(word(body, &mut at)?);
        let max_timestamp = i64::from_be_bytes(word(body, &mut at)?);
        let max_timestamp_offset = i64::from_be_bytes(word(body, &mut at)?);
        let mut parts = Vec::with_capacity(3);
        for _ in 0..3 {
            let len = usize::try_from(u64::from_be_bytes(word(body, &mut at)?)).ok()?;
            parts.push(body.get(at..at.checked_add(len)?)?);
            at += len;
        }
        if at != body.len() {
            return None;
        }
        Some(CleanState {
            indexes: SegmentIndexes {
                size,
                next_offset,
                max_timestamp,
                max_timestamp_offset,
                index: OffsetIndex::decode(parts[0], size)?,
                time_index: TimeIndex::decode(parts[1])?,
            },
            producers: ProducerStates::decode(parts[2])?,
        })
    }
}

impl Segment {
    /// The state a clean stop leaves for the active segment (with the
    /// partition's encoded producer state), checksummed: see `clean_path`.
    pub fn clean_state(&self, producers: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + producers.len());
        b.extend_from_slice(CLEAN_MAGIC);
        b.extend_from_slice(&self.size.to_be_bytes());
        for v in [
            self.next_offset,
            self.max_timestamp,
            self.max_timestamp_offset,
        ] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        for part in [
            &self.index.encode()[..],
            &self.time_index.encode(),
            producers,
        ] {
            b.extend_from_slice(&(part.len() as u64).to_be_bytes());
            b.extend_from_slice(part);
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    /// The state a clean stop left for this (the last) segment, if there
    /// is one that holds together and agrees with the file: nothing but
    /// zeros may follow its size (a batch written after the state was
    /// taken would). The file is removed, durably, whatever it holds, so
    /// a state is never trusted twice: appends after this start change
    /// the segment.
    pub(super) async fn take_clean_state(
        &self,
        file_size: u64,
    ) -> Result<Option<CleanState>, StorageError> {
        let path = clean_path(&self.dir, self.base);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                log::warn!("{}: {e}; scanning the segment", path.display());
                Vec::new()
            }
        };
        std::fs::remove_file(&path)
            .map_err(|e| StorageError::Io(format!("removing {}: {e}", path.display())))?;
        sync_dir_in_ring(&self.dir).await?;
        let Some(state) = CleanState::parse(&bytes) else {
            log::warn!(
                "{}: the clean-stop state does not hold together; scanning the segment",
                path.display()
            );
            return Ok(None);
        };
        let (size, next_offset) = (state.indexes.size, state.indexes.next_offset);
        if size > file_size || next_offset < self.base {
            log::warn!(
                "{}: the clean-stop state disagrees with the segment; scanning it",
                path.display()
            );
            return Ok(None);
        }
        if size < file_size {
            let probe = (file_size - size).min(4096) as usize;
            let after = self.file.read_at(size, probe).await.map_err(|e| {
                StorageError::io(
                    format!("reading {}", log_path(&self.dir, self.base).display()),
                    e,
                )
            })?;
            if after.iter().any(|b| *b != 0) {
                log::warn!(
                    "{}: bytes follow the clean-stop state's end; scanning the segment",
                    path.display()
                );
                return Ok(None);
            }
        }
        Ok(Some(state))
    }
}
