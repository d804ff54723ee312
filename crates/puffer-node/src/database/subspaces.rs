//! A database's subspaces (see [`crate::subspace`]): writes routed to every copy, reads
//! routed to the fewest regions, subspaces built and dropped while both go on.

use std::sync::{Arc, MutexGuard};

use puffer_query::{QueryError, Result};
use puffer_store::shard::MAX_RESULT_ROWS;
use puffer_store::{Predicate, Query, ReadOptions, Record, StoreError, WriteOp};

use super::{Database, TableRoles};
use crate::message::ReadRequest;
use crate::remote::{LeaderRequest, LeaderResponse};
use crate::subspace::{self, SubspaceOf, MAX_SUBSPACES_PER_TABLE};
use crate::table::{Table, TableLayout};

/// A write's operations by table.
type Parts = Vec<(Arc<Table>, Vec<WriteOp>)>;

/// Records copied into a subspace being built per SCU (their keys locked meanwhile).
const BUILD_BATCH_RECORDS: usize = 512;
/// A build refused as overloaded (compaction behind) waits this long and tries the
/// batch again, at most this many times in a row (a minute).
const BUILD_OVERLOADED_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
const MAX_BUILD_OVERLOADED_TRIES: u32 = 6000;

impl Database {
    /// The subspaces of table `table` (ready or being built), by name.
    pub fn subspaces_of(&self, table: &str) -> Vec<Arc<Table>> {
        // The map is ordered by name: subspaces come out in that order.
        self.all_tables()
            .into_iter()
            .filter(|t| t.subspace_of().is_some_and(|s| s.table == table))
            .collect()
    }

    /// Table `table`'s subspaces as `DESCRIBE` shows them.
    pub fn describe_subspaces(&self, table: &str) -> Vec<subspace::SubspaceDescription> {
        self.subspaces_of(table)
            .iter()
            .filter_map(|copy| {
                let of = copy.subspace_of()?;
                Some(subspace::SubspaceDescription {
                    name: copy.name().to_string(),
                    parts: of.grid.dimensions.iter().map(|d| d.parts()).collect(),
                    regions: copy.layout().shards,
                    attributes: of.attributes.clone(),
                    ready: of.ready,
                })
            })
            .collect()
    }

    /// A write's parts with each subspace's copies added: for every table with
    /// subspaces, the current record of each key it touches is read (under the key's
    /// lock, returned to be held until the SCU is published), and every subspace gets
    /// the operations that move its copies along. A write to a subspace itself is
    /// refused.
    pub(super) fn routed_to_subspaces(
        &self,
        joined: Vec<(Arc<Table>, Vec<WriteOp>)>,
    ) -> Result<(Parts, Vec<MutexGuard<'_, ()>>)> {
        let mut out = Vec::with_capacity(joined.len());
        let mut guards = Vec::new();
        for (table, ops) in joined {
            if let Some(of) = table.subspace_of() {
                return Err(QueryError::Invalid(format!(
                    "{} is a subspace of table {}: write to {} instead",
                    table.name(),
                    of.table,
                    of.table
                )));
            }
            let subspaces = self.subspaces_of(table.name());
            let profiling = self.profiling(&table);
            if subspaces.is_empty() && !profiling {
                out.push((table, ops));
                continue;
            }
            if !subspaces.is_empty() {
                guards.extend(self.key_locks.lock(table.uid(), subspace::keys_of(&ops)));
            }
            let mut before = subspace::Current::new();
            for key in subspace::keys_of(&ops) {
                if !before.contains_key(key) {
                    let (record, _) = table.get(key, ReadOptions::default())?;
                    before.insert(key.to_vec(), record);
                }
            }
            if profiling {
                self.profile_updates(&table, &ops, &before);
            }
            let schema = table.schema();
            for copy in subspaces {
                let of = copy.subspace_of().expect("listed as a subspace");
                let copy_ops = subspace::subspace_ops(&of, &schema, &ops, &mut before.clone())?;
                if !copy_ops.is_empty() {
                    out.push((copy, copy_ops));
                }
            }
            out.push((table, ops));
        }
        Ok((out, guards))
    }

    /// Where a search or count of `table` reads fewest: the ready subspace whose regions
    /// matching the predicate are the smallest share of its grid (then the fewest
    /// regions, then the one whose attribute ids, sorted, sort first: the model's order,
    /// whatever order the subspaces were built in), with those regions; `None` when none beats the
    /// table's own shards so (a smaller share, or the same share in fewer regions), or
    /// the request is a get. A subspace is passed over for a read at a
    /// snapshot older than the one it was ready at, and, where this node reads it
    /// itself, until this node has applied that snapshot.
    pub(super) fn subspace_route(
        &self,
        table: &Table,
        request: &ReadRequest,
    ) -> Option<(Arc<Table>, Vec<u32>)> {
        let predicate = match request {
            ReadRequest::Search { query } => &query.predicate,
            ReadRequest::Count { predicate, .. } => predicate,
            // Columns and aggregates come from the table itself: a region's rows carry
            // stored keys.
            ReadRequest::Get { .. }
            | ReadRequest::GetRaw { .. }
            | ReadRequest::Columns { .. }
            | ReadRequest::Aggregate { .. } => return None,
        };
        let key_name = table.schema().key.clone();
        let asked_at = request.read_options().at;
        let reads_elsewhere = self
            .options
            .remote
            .as_ref()
            .is_some_and(|remote| remote.reads_elsewhere());
        let published = self.published();
        let table_shards = table.layout().shards;
        let schema = table.schema();
        /// The best subspace so far and the regions it asks of its grid's.
        struct Best {
            copy: Arc<Table>,
            regions: Vec<u32>,
            grid_regions: u32,
        }
        // A subspace's attribute ids, sorted: the model's order of subspaces. Only
        // asked on a tie, so a search builds none in the common case.
        let order = |copy: &Table| -> Vec<u16> {
            let mut ids: Vec<u16> = copy
                .subspace_of()
                .map(|of| {
                    of.attributes
                        .iter()
                        .map(|name| schema.id_of(name).unwrap_or(u16::MAX))
                        .collect()
                })
                .unwrap_or_default();
            ids.sort_unstable();
            ids
        };
        let mut best: Option<Best> = None;
        for copy in self.subspaces_of(table.name()) {
            let Some(of) = copy.subspace_of().filter(|s| {
                s.ready
                    && asked_at.is_none_or(|at| at >= s.ready_at)
                    && (reads_elsewhere || published >= s.ready_at)
            }) else {
                continue;
            };
            let regions = of.regions_for(predicate, &key_name)?;
            let total = copy.layout().shards;
            // Shares compared as fractions: regions / total, cross-multiplied. The table
            // itself is the first to beat (all of its shards); an equal share asking
            // fewer regions beats it too (a one-region grid over the table's 4 shards),
            // as the model routes (`puffer_adapt::hyperspace::route_search`).
            // Ties between subspaces are broken as the model breaks them
            // (`Configuration` keeps its subspaces sorted): by the order they were built
            // in (their names), a search of a locality and a rating went to (ratings) or
            // to (locality) as the configurations before had left the names, reading
            // a common rating's rows where the model charged the locality's.
            let (best_asked, best_total) = best
                .as_ref()
                .map_or((table_shards as usize, table_shards), |b| {
                    (b.regions.len(), b.grid_regions)
                });
            let (a, b) = (
                regions.len() as u64 * u64::from(best_total),
                best_asked as u64 * u64::from(total),
            );
            let better = a < b
                || (a == b && regions.len() < best_asked)
                || (a == b
                    && regions.len() == best_asked
                    && best.as_ref().is_some_and(|b| order(&copy) < order(&b.copy)));
            if better {
                best = Some(Best {
                    copy,
                    regions,
                    grid_regions: total,
                });
            }
        }
        best.map(|b| (b.copy, b.regions))
    }

    /// A search or count of subspace `copy` from its regions `regions`: here where this
    /// node holds them all, else where they are held.
    pub(super) fn read_regions(
        &self,
        copy: &Table,
        request: &ReadRequest,
        regions: &[u32],
    ) -> Result<crate::message::ReadAnswer> {
        let of = copy.subspace_of();
        let request = request.at_least(of.map_or(0, |s| s.ready_at));
        match &self.options.remote {
            Some(remote) if remote.reads_elsewhere() || !regions.iter().all(|&r| copy.holds(r)) => {
                // No region matches: the first answers (nothing), as here.
                let regions = if regions.is_empty() {
                    &[0][..]
                } else {
                    regions
                };
                remote.read_regions(copy.name(), &request, regions)
            }
            _ => copy.read_regions(&request, regions),
        }
    }

    /// Adds a subspace to table `table` over `attributes`, cut into at most `regions`
    /// regions, each with as many replicas as the table's shards: cuts from the
    /// records at one snapshot, the subspace made (writes keep it from then on), every
    /// record of a later snapshot copied in under its key's lock, then marked ready in
    /// the catalog, the one switch. Reads and writes go on meanwhile. Returns the
    /// subspace's name.
    ///
    /// On a cluster node that follows, the ingest leader builds it (it holds every
    /// record); this node then takes the catalog's tables in, so that its own reads
    /// use the subspace at once.
    pub fn add_subspace(&self, table: &str, attributes: &[String], regions: u32) -> Result<String> {
        if let Some(remote) = self.handing_on() {
            let request = LeaderRequest::AddSubspace {
                table: table.to_string(),
                attributes: attributes.to_vec(),
                regions,
            };
            return match remote.lead(request)? {
                LeaderResponse::SubspaceAdded { name } => {
                    self.sync_tables()?;
                    Ok(name)
                }
                other => Err(unexpected_answer("adding a subspace", &other)),
            };
        }
        self.check_not_following("add a subspace")?;
        let base = self.table(table)?;
        if base.partition().is_some() || base.chunk_of().is_some() || base.subspace_of().is_some() {
            return Err(QueryError::Invalid(format!(
                "{table} is a time-partitioned table, a time chunk or a subspace: only plain \
                 tables have subspaces"
            )));
        }
        subspace::check_table_name(table)?;
        let existing = self.subspaces_of(table);
        if existing.len() >= MAX_SUBSPACES_PER_TABLE {
            return Err(QueryError::Limit(format!(
                "a table has at most {MAX_SUBSPACES_PER_TABLE} subspaces; {table} has {}",
                existing.len()
            )));
        }
        if existing
            .iter()
            .any(|t| t.subspace_of().is_some_and(|s| s.attributes == attributes))
        {
            return Err(QueryError::Invalid(format!(
                "{table} has a subspace over {attributes:?} already"
            )));
        }
        let schema = base.schema();
        subspace::check_subspace(&schema, attributes, regions)?;
        let sample = every_record(&base, Some(attributes.to_vec()))?;
        let grid = subspace::plan_grid(&schema, attributes, regions, &sample)?;
        drop(sample);
        let name = (1..=MAX_SUBSPACES_PER_TABLE)
            .map(|n| subspace::subspace_name(table, n))
            .find(|name| self.table(name).is_err())
            .ok_or_else(|| QueryError::Limit(format!("{table} has no free subspace name left")))?;
        let of = SubspaceOf {
            table: table.to_string(),
            attributes: attributes.to_vec(),
            grid,
            ready: false,
            ready_at: 0,
        };
        {
            // No write is under way while it appears: each one after it keeps it.
            let _alone = self
                .key_locks
                .configuration
                .write()
                .expect("subspace configuration lock");
            let layout = TableLayout {
                shards: of.grid.regions() as u32,
                replicas: base.layout().replicas,
            };
            let roles = TableRoles {
                subspace_of: Some(of.clone()),
                ..TableRoles::default()
            };
            self.create_table_here(&name, (*schema).clone(), layout, roles)?;
        }
        let copy = self.table(&name)?;
        if let Err(e) = self.fill_subspace(&base, &copy, &of) {
            drop(copy); // (the drop waits for every holder to let go)
            let _ = self.drop_subspace(table, &name);
            return Err(e);
        }
        // Every copy made so far is published: a read at this snapshot or later finds
        // every record in it.
        let ready = SubspaceOf {
            ready: true,
            ready_at: self.published(),
            ..of
        };
        self.catalog.set_subspace(&name, copy.uid(), &ready)?;
        copy.set_subspace_ready(ready.ready_at);
        Ok(name)
    }

    /// Copies every record of `base` (at a snapshot taken after `copy` was made) into
    /// it, each under its key's lock as it is then.
    fn fill_subspace(&self, base: &Table, copy: &Table, of: &SubspaceOf) -> Result<()> {
        let keys = every_record(base, Some(Vec::new()))?;
        for batch in keys.chunks(BUILD_BATCH_RECORDS) {
            let mut tries = 0;
            loop {
                match self.copy_into_subspace(base, copy, of, batch) {
                    // Compaction behind: the build waits for it, as a writer would.
                    Err(QueryError::Store(StoreError::Overloaded(_)))
                        if tries < MAX_BUILD_OVERLOADED_TRIES =>
                    {
                        tries += 1;
                        std::thread::sleep(BUILD_OVERLOADED_PAUSE);
                    }
                    answer => break answer?,
                }
            }
        }
        Ok(())
    }

    /// Copies the records of `rows`' keys as they are now into subspace `copy`, as one
    /// SCU, their keys locked meanwhile.
    fn copy_into_subspace(
        &self,
        base: &Table,
        copy: &Table,
        of: &SubspaceOf,
        rows: &[Record],
    ) -> Result<()> {
        let _configuration = self
            .key_locks
            .configuration
            .read()
            .expect("subspace configuration lock");
        let _keys = self
            .key_locks
            .lock(base.uid(), rows.iter().map(|r| r.key.as_slice()));
        let mut ops = Vec::with_capacity(rows.len());
        for row in rows {
            // Deleted since the snapshot: nothing to copy.
            if let (Some(record), _) = base.get(&row.key, ReadOptions::default())? {
                let region = of.region_of(&record);
                ops.push(WriteOp::Put(Record {
                    key: subspace::stored_key(region, &record.key),
                    values: record.values,
                }));
            }
        }
        if !ops.is_empty() {
            self.committer
                .write(vec![(copy.table_shards().clone(), ops)])?;
        }
        Ok(())
    }

    /// Drops subspace `name` of table `table`; reads go to the table or its other
    /// subspaces from then on.
    pub fn drop_subspace(&self, table: &str, name: &str) -> Result<()> {
        if let Some(remote) = self.handing_on() {
            let request = LeaderRequest::DropSubspace {
                table: table.to_string(),
                name: name.to_string(),
            };
            return match remote.lead(request)? {
                LeaderResponse::Done => self.sync_tables(),
                other => Err(unexpected_answer("dropping a subspace", &other)),
            };
        }
        self.check_not_following("drop a subspace")?;
        let copy = self.table(name)?;
        if copy.subspace_of().is_none_or(|s| s.table != table) {
            return Err(QueryError::Invalid(format!(
                "{name} is not a subspace of table {table}"
            )));
        }
        // The drop waits for every holder of its replicas to let go: this one first.
        drop(copy);
        let _alone = self
            .key_locks
            .configuration
            .write()
            .expect("subspace configuration lock");
        self.drop_table_here(name)
    }

    /// Drops the subspaces a crash left unfinished (not ready: a build cut short) or
    /// without their table. Done when a single node opens, and by a cluster node when
    /// it becomes the ingest leader (a build is the leader's, and ends with it); a
    /// node that follows does nothing.
    pub fn drop_unfinished_subspaces(&self) -> Result<()> {
        if self.committer.is_following() {
            return Ok(());
        }
        let unfinished: Vec<(String, String)> = {
            let tables = self.tables.read().expect("tables lock");
            tables
                .values()
                .filter_map(|t| {
                    let of = t.subspace_of()?;
                    let orphan = !tables.contains_key(&of.table);
                    (!of.ready || orphan).then(|| (of.table.clone(), t.name().to_string()))
                })
                .collect()
        };
        for (table, name) in unfinished {
            self.drop_subspace(&table, &name)?;
        }
        Ok(())
    }
}

/// Every record of `table` at one snapshot (projected to `projection`); a table of more
/// than [`MAX_RESULT_ROWS`] records is refused (a subspace is built from one read).
fn every_record(table: &Table, projection: Option<Vec<String>>) -> Result<Vec<Record>> {
    let result = table.search(&Query {
        predicate: Predicate::All,
        projection,
        limit: Some(MAX_RESULT_ROWS),
        read: ReadOptions::default(),
    })?;
    if result.truncated {
        return Err(QueryError::Limit(format!(
            "a subspace is built for a table of at most {MAX_RESULT_ROWS} records; {} has more",
            table.name()
        )));
    }
    Ok(result.rows)
}

/// The error for a leader's answer that does not fit the request.
fn unexpected_answer(doing: &str, answer: &LeaderResponse) -> QueryError {
    QueryError::Store(StoreError::Unavailable(format!(
        "the leader answered {doing} with {answer:?}"
    )))
}
