//! Producer ids, unique across restarts. Owned by the catalog shard: it hands
//! out ids from a block whose end is recorded durably in
//! `DATA/producer_ids` before any id of the block is given out.

use std::path::{Path, PathBuf};

/// Ids reserved per write of the block file (or per block a cluster's
/// metadata quorum gives).
pub const BLOCK: i64 = 1000;

/// Lives on the catalog shard.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    next: i64,
    block_end: i64,
}

impl ProducerIds {
    /// Starts after the last block recorded, so no id is ever reused.
    pub fn load(data_dir: &Path) -> Result<ProducerIds, String> {
        let path = data_dir.join("producer_ids");
        let end = match std::fs::read_to_string(&path) {
            Ok(s) => s
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("{} does not hold a number", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        Ok(ProducerIds {
            path,
            next: end,
            block_end: end,
        })
    }

    /// The end of the last block recorded here: no id below it may be
    /// given again (a single node's data directory seeding a cluster).
    pub fn recorded_end(&self) -> i64 {
        self.block_end
    }

    /// In a cluster: the next id of the block the quorum gave, if any is
    /// left.
    pub fn take(&mut self) -> Option<i64> {
        (self.next < self.block_end).then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// In a cluster: the block `start..start + BLOCK` the quorum gave.
    pub fn set_block(&mut self, start: i64) {
        self.next = start;
        self.block_end = start + BLOCK;
    }

    /// The next unused producer id.
    pub fn allocate(&mut self) -> Result<i64, String> {
        if self.next >= self.block_end {
            let end = self.block_end + BLOCK;
            write_durably(&self.path, end.to_string().as_bytes())?;
            self.block_end = end;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }
}

fn write_durably(path: &Path, body: &[u8]) -> Result<(), String> {
    weir_storage::durable::replace(path, body)
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_across_restarts() {
        let dir = std::env::temp_dir().join(format!("weir-pids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut a = ProducerIds::load(&dir).unwrap();
        let first: Vec<i64> = (0..3).map(|_| a.allocate().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        let mut b = ProducerIds::load(&dir).unwrap();
        assert!(b.allocate().unwrap() > 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
