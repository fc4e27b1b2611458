//! A pass's key map: every key of the dirty segments with its latest
//! offset, within a budget of bytes (a larger dirty section is cleaned
//! over several passes); control batches and aborted transactions map
//! nothing.

use std::collections::HashMap;

use super::batches::{body_of, raw_records, Batches};
use super::SegInfo;
use crate::batch::BatchHeader;
use crate::log::PartitionLog;
use crate::StorageError;

/// What one key costs in the map besides its bytes (the table's slot, the
/// box and the offset).
const ENTRY_OVERHEAD: usize = 48;

impl PartitionLog {
    /// Every key of the dirty segments with its latest offset, and the
    /// offset the map covers up to: whole segments, until the map passes
    /// the budget (so by at most one segment's keys).
    pub(super) async fn key_map(
        &self,
        dirty: &[&SegInfo],
        first_dirty: i64,
        budget: usize,
    ) -> Result<(HashMap<Box<[u8]>, i64>, i64), StorageError> {
        let mut map: HashMap<Box<[u8]>, i64> = HashMap::new();
        let mut bytes = 0usize;
        let mut end = first_dirty;
        for s in dirty {
            if bytes > budget {
                break;
            }
            let mut batches = Batches { seg: s, pos: 0 };
            loop {
                let chunk = batches.next_chunk().await?;
                if chunk.is_empty() {
                    break;
                }
                for (h, batch) in chunk {
                    if h.is_control() || self.aborted(&h) {
                        continue;
                    }
                    let body = body_of(&batch, &h)?;
                    for r in raw_records(&body, &h).map_err(StorageError::Corrupt)? {
                        let Some(k) = r.key else { continue };
                        let key = &body[k];
                        match map.get_mut(key) {
                            Some(o) => *o = (*o).max(r.offset),
                            None => {
                                bytes += key.len() + ENTRY_OVERHEAD;
                                map.insert(key.into(), r.offset);
                            }
                        }
                    }
                }
                // Requests first: the pass's queue has a tenth of their
                // share, and its turn ends after each chunk.
                glommio::executor().yield_task_queue_now().await;
            }
            end = s.end;
        }
        Ok((map, end))
    }

    /// Whether a transactional batch belongs to an aborted transaction.
    pub(super) fn aborted(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && self
                .producers
                .borrow()
                .aborted_between(h.base_offset, h.last_offset() + 1)
                .iter()
                .any(|t| t.producer_id == h.producer_id)
    }
}
