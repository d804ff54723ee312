//! What a replica is to the adaptivity runtime: a set of compressed indexes whose sample
//! layers move together, plus memory that layers do not change.
//!
//! A store replica's indexes are its segments'; compaction replaces segments, and a new
//! segment arrives with the layers it was built with, so the runtime does not assume
//! layer counts stick: it keeps a target per replica and reconciles every index to it
//! every `delta` ([`reconcile`]).

use puffer_index::{Construction, TextIndex};

use std::sync::Arc;

use puffer_adapt::attributes::LayerKind;
use puffer_store::attr_layer::AttributeRows;
use puffer_store::segment::Segment;
use puffer_store::{AttrType, Shard};

/// A copy of a shard's data whose sample layers the runtime manages.
pub trait LayeredReplica: Send + Sync + 'static {
    /// The compressed indexes whose layers this replica manages, now.
    fn indexes(&self) -> Vec<TextIndex>;
    /// Resident bytes outside the indexes (key directories, boundaries, deletion marks).
    fn other_memory_bytes(&self) -> u64;

    /// Rows served since the replica opened, per attribute, that layers of `kind`
    /// serve or would serve (none for a replica without attributes): rows attribute
    /// predicates found, or values column reads took.
    fn layer_demand(&self, _kind: LayerKind) -> Vec<AttributeRows> {
        Vec::new()
    }

    /// Brings the replica's layers of `kind` to `target` (drops at once, one build at a
    /// time started on a thread of its own) and reports on the attributes of `report`.
    fn reconcile_layers(
        &self,
        _kind: LayerKind,
        _target: &[u16],
        _report: &[u16],
    ) -> Vec<AttributeLayerRow> {
        Vec::new()
    }

    /// Resident bytes in all: the indexes at their present layers and the rest.
    fn footprint_bytes(&self) -> u64 {
        self.other_memory_bytes()
            + self
                .indexes()
                .iter()
                .map(|index| index.footprint().total_bytes())
                .sum::<u64>()
    }
}

impl LayeredReplica for TextIndex {
    fn indexes(&self) -> Vec<TextIndex> {
        vec![self.clone()]
    }

    fn other_memory_bytes(&self) -> u64 {
        0
    }
}

/// One attribute's layers of one kind on a replica, read off its segments.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttributeLayerRow {
    /// The attribute.
    pub attribute: u16,
    /// Segments holding its layer, of all segments.
    pub segments_held: usize,
    /// Segments of the replica.
    pub segments: usize,
    /// Bytes the layers held take.
    pub held_bytes: u64,
    /// Bytes the layers of the other segments would take.
    pub missing_bytes: u64,
    /// A build is running.
    pub building: bool,
    /// Why a segment's build failed, if one did.
    pub failure: Option<String>,
}

impl LayeredReplica for Shard {
    fn indexes(&self) -> Vec<TextIndex> {
        self.segments().iter().map(|s| s.index().clone()).collect()
    }

    fn other_memory_bytes(&self) -> u64 {
        let segments: u64 = self
            .segments()
            .iter()
            .map(|s| s.memory_bytes() - s.index().footprint().total_bytes())
            .sum();
        segments + self.record_cache_stats().bytes
    }

    fn layer_demand(&self, kind: LayerKind) -> Vec<AttributeRows> {
        match kind {
            LayerKind::Attribute => Shard::attribute_demand(self),
            LayerKind::Column => Shard::column_demand(self),
        }
    }

    fn reconcile_layers(
        &self,
        kind: LayerKind,
        target: &[u16],
        report: &[u16],
    ) -> Vec<AttributeLayerRow> {
        let segments = self.segments();
        let types: Vec<AttrType> = self
            .schema()
            .attributes
            .iter()
            .map(|a| a.attr_type)
            .collect();
        let mut rows: Vec<AttributeLayerRow> = report
            .iter()
            .map(|&attribute| AttributeLayerRow {
                attribute,
                segments: segments.len(),
                ..AttributeLayerRow::default()
            })
            .collect();
        let shelves: Vec<SegmentShelf> = segments
            .iter()
            .map(|segment| SegmentShelf {
                segment,
                kind,
                types: &types,
            })
            .collect();
        let mut building = shelves.iter().any(|s| !s.building().is_empty());
        for shelf in &shelves {
            for attribute in shelf.held() {
                if !target.contains(&attribute) {
                    shelf.drop_layer(attribute);
                }
            }
            for &attribute in target {
                if !building && shelf.held_bytes(attribute).is_none() {
                    building = shelf.start(attribute);
                }
            }
            let building_here = shelf.building();
            let failures = shelf.failures();
            for row in &mut rows {
                match shelf.held_bytes(row.attribute) {
                    Some(bytes) => {
                        row.segments_held += 1;
                        row.held_bytes += bytes;
                    }
                    None => row.missing_bytes += shelf.cost_bytes(row.attribute),
                }
                row.building |= building_here.contains(&row.attribute);
                if let Some((_, why)) = failures.iter().find(|(a, _)| *a == row.attribute) {
                    row.failure = Some(format!("segment {}: {why}", shelf.segment.id));
                }
            }
        }
        rows
    }
}

/// One segment's layers of one kind, as reconciling sees them.
struct SegmentShelf<'a> {
    segment: &'a Arc<Segment>,
    kind: LayerKind,
    types: &'a [AttrType],
}

impl SegmentShelf<'_> {
    fn held(&self) -> Vec<u16> {
        match self.kind {
            LayerKind::Attribute => self.segment.attribute_layer_attributes(),
            LayerKind::Column => self.segment.column_layer_attributes(),
        }
    }

    fn held_bytes(&self, attribute: u16) -> Option<u64> {
        match self.kind {
            LayerKind::Attribute => self
                .segment
                .attribute_layer(attribute)
                .map(|l| l.byte_len()),
            LayerKind::Column => self.segment.column_layer(attribute).map(|l| l.byte_len()),
        }
    }

    /// What a layer would take here (a segment that cannot say reports why elsewhere).
    fn cost_bytes(&self, attribute: u16) -> u64 {
        match self.kind {
            LayerKind::Attribute => self.segment.attribute_layer_cost_bytes(attribute),
            LayerKind::Column => self.segment.column_layer_cost_bytes(attribute),
        }
        .unwrap_or(0)
    }

    fn drop_layer(&self, attribute: u16) {
        match self.kind {
            LayerKind::Attribute => self.segment.drop_attribute_layer(attribute),
            LayerKind::Column => self.segment.drop_column_layer(attribute),
        };
    }

    fn start(&self, attribute: u16) -> bool {
        match self.kind {
            LayerKind::Attribute => self.segment.start_attribute_layer(attribute),
            LayerKind::Column => self
                .segment
                .start_column_layer(attribute, self.types.to_vec()),
        }
    }

    fn building(&self) -> Vec<u16> {
        match self.kind {
            LayerKind::Attribute => self.segment.attribute_layers_building(),
            LayerKind::Column => self.segment.column_layers_building(),
        }
    }

    fn failures(&self) -> Vec<(u16, String)> {
        match self.kind {
            LayerKind::Attribute => self.segment.attribute_layer_failures(),
            LayerKind::Column => self.segment.column_layer_failures(),
        }
    }
}

/// Layer state of a replica, read off its indexes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerState {
    /// Layers every index has (the replica's effective layer count); 1 with no index.
    pub layers: u32,
    /// Layers every index can have.
    pub max_layers: u32,
    /// Resident bytes of the indexes and the rest.
    pub footprint_bytes: u64,
    /// What the next layer below `target` costs, in the given construction mode.
    pub next_layer_bytes: u64,
    /// What dropping the deepest layer (at `target - 1`) frees.
    pub deepest_layer_bytes: u64,
    /// Some index is still short of the target (a dedicated build is running).
    pub building: bool,
}

/// Brings every index of `replica` to `target` layers (dropping is immediate; adding
/// starts one layer per index per call) and reports the state.
pub fn reconcile<R: LayeredReplica + ?Sized>(
    replica: &R,
    target: u32,
    construction: Construction,
) -> LayerState {
    let indexes = replica.indexes();
    let mut state = LayerState {
        layers: u32::MAX,
        max_layers: u32::MAX,
        footprint_bytes: replica.other_memory_bytes(),
        ..LayerState::default()
    };
    for index in &indexes {
        let target_here = target.clamp(1, index.max_layers());
        if !index.layer_build_pending() {
            while index.layer_count() > target_here {
                if index.drop_layer().is_err() {
                    break;
                }
            }
            if index.layer_count() < target_here {
                // Errors here mean another build raced us; the next call retries.
                let _ = index.add_layer(construction);
            }
        }
        // A layer being built by a dedicated thread is not counted until it is published.
        let count = index.layer_count();
        state.building |= count < target_here;
        state.layers = state.layers.min(count);
        state.max_layers = state.max_layers.min(index.max_layers());
        state.footprint_bytes += index.footprint().total_bytes();
        state.next_layer_bytes += index.layer_bytes(target_here, construction);
        if target_here > 1 {
            state.deepest_layer_bytes += index.layer_bytes(target_here - 1, construction);
        }
    }
    if indexes.is_empty() {
        // Nothing to manage yet (no segment): one base layer, nothing to add.
        state.layers = 1;
        state.max_layers = 1;
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_index::BuildOptions;

    #[test]
    fn reconcile_moves_every_index_to_the_target() {
        let text: Vec<u8> = (0..20_000u32)
            .map(|i| b"abcab"[(i * 7 % 5) as usize])
            .collect();
        let options = BuildOptions {
            levels: 4,
            ..BuildOptions::default()
        };
        let index = TextIndex::build_with(&text, &options, &mut |_, _| {}).unwrap();
        assert_eq!(index.layer_count(), 4);
        let full_bytes = index.footprint().total_bytes();

        let state = reconcile(&index, 1, Construction::Opportunistic);
        assert_eq!(
            (state.layers, state.max_layers, state.building),
            (1, 4, false)
        );
        assert_eq!(state.footprint_bytes, index.footprint().total_bytes());
        assert!(state.footprint_bytes < full_bytes);
        assert_eq!(
            state.next_layer_bytes,
            index.layer_bytes(1, Construction::Opportunistic)
        );

        let state = reconcile(&index, 3, Construction::Opportunistic);
        // Opportunistic: one layer per call.
        assert_eq!(index.layer_count(), 2);
        assert!(state.building);
        let state = reconcile(&index, 3, Construction::Opportunistic);
        assert_eq!((index.layer_count(), state.layers), (3, 3));
        let state = reconcile(&index, 3, Construction::Opportunistic);
        assert!(!state.building);
        assert_eq!(
            state.deepest_layer_bytes,
            index.layer_bytes(2, Construction::Opportunistic)
        );

        // Targets beyond the index are clamped.
        reconcile(&index, 9, Construction::Dedicated);
        index.wait_for_layer_build();
        let state = reconcile(&index, 9, Construction::Dedicated);
        assert_eq!(
            (index.layer_count(), state.layers, state.building),
            (4, 4, false)
        );
    }
}
