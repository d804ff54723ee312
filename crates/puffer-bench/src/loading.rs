//! Loading an imported table into a shard, as the experiments that build their own
//! shard do.

use anyhow::Context;
use puffer_query::import::ImportedTable;
use puffer_store::{Shard, StoreError, WriteOp};

/// Writes every row of `table` into `shard` in SCUs of `batch_rows` records, waiting
/// while the store asks writers to slow down (`Overloaded`).
pub fn put_rows(shard: &Shard, table: &ImportedTable, batch_rows: usize) -> anyhow::Result<()> {
    for start in (0..table.len()).step_by(batch_rows.max(1)) {
        let rows = start..(start + batch_rows.max(1)).min(table.len());
        loop {
            let ops = rows
                .clone()
                .map(|row| WriteOp::Put(table.record(row)))
                .collect();
            match shard.write(ops) {
                Ok(_) => break,
                Err(StoreError::Overloaded(_)) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(e) => return Err(e).with_context(|| format!("writing rows {rows:?}")),
            }
        }
    }
    Ok(())
}
