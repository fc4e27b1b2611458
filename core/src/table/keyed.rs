//! A keyed table's current rows (the latest row per primary key), kept per
//! shard for the partitions it owns and brought up to date from the log by
//! each scan. Held by the table code, not by the partition: a partition
//! knows its log, not what SQL makes of it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::rc::Rc;

use serde_json::Value;

use super::scan::{each_record, table_row, ScanError};
use super::schema::TableSchema;
use crate::by_partition::TopicPartition;
use crate::partition::Partition;

/// One keyed table partition's current rows.
#[derive(Default)]
pub struct KeyedRows {
    /// Every record below this offset is applied.
    upto: i64,
    /// Key → (offset of its latest row, the row).
    rows: HashMap<Vec<u8>, (i64, Vec<Value>)>,
}

impl KeyedRows {
    /// The rows, oldest write first (the order a scan returns them in).
    pub fn in_offset_order(&self) -> impl Iterator<Item = &Vec<Value>> {
        let mut rows: Vec<&(i64, Vec<Value>)> = self.rows.values().collect();
        rows.sort_by_key(|(offset, _)| *offset);
        rows.into_iter().map(|(_, r)| r)
    }
}

/// The keyed tables' rows of the partitions one shard owns.
#[derive(Default)]
pub struct KeyedTables {
    tables: RefCell<HashMap<TopicPartition, Rc<RefCell<KeyedRows>>>>,
}

impl KeyedTables {
    /// The partition's rows with every record up to its high watermark
    /// applied (the records appended since the last scan are read now).
    pub async fn refreshed(
        &self,
        p: &Partition,
        schema: &TableSchema,
    ) -> Result<Rc<RefCell<KeyedRows>>, ScanError> {
        let rows = self
            .tables
            .borrow_mut()
            .entry(TopicPartition::new(p.topic.clone(), p.index))
            .or_default()
            .clone();
        let start = p.log.log_start();
        let from = {
            let mut st = rows.borrow_mut();
            if st.upto < start {
                // Retention moved the log start past what was applied: rows
                // before it are gone from the log, so they go here too.
                *st = KeyedRows {
                    upto: start,
                    rows: HashMap::new(),
                };
            }
            st.upto
        };
        each_record(p, from, &mut |r| {
            let mut st = rows.borrow_mut();
            // A concurrent scan may have applied this record already.
            if r.offset < st.upto {
                return Ok(ControlFlow::Continue(()));
            }
            if let Some(k) = &r.key {
                match table_row(schema, r) {
                    Some(row) => {
                        st.rows.insert(k.to_vec(), (r.offset, row));
                    }
                    None => {
                        st.rows.remove(&k[..]);
                    }
                }
            }
            st.upto = r.offset + 1;
            Ok(ControlFlow::Continue(()))
        })
        .await?;
        Ok(rows)
    }

    /// Forgets a partition this shard no longer has (its topic deleted, or
    /// made again under the same name).
    pub fn forget(&self, tp: &TopicPartition) {
        self.tables.borrow_mut().remove(tp);
    }
}
