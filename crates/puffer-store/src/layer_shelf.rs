//! The layers of one kind a segment holds (attribute layers, column layers), one per
//! attribute at most: published as an immutable list swapped whole, so queries never
//! wait for a change and keep what they loaded; with the builds running and those that
//! failed (not tried again: a segment that cannot be read reports it to every query
//! anyway).

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

/// A layer of one attribute.
pub(crate) trait ShelvedLayer: Send + Sync + 'static {
    fn attribute(&self) -> u16;
    fn byte_len(&self) -> u64;
}

impl ShelvedLayer for crate::attr_layer::AttributeLayer {
    fn attribute(&self) -> u16 {
        self.attribute()
    }
    fn byte_len(&self) -> u64 {
        self.byte_len()
    }
}

impl ShelvedLayer for crate::column_layer::ColumnLayer {
    fn attribute(&self) -> u16 {
        self.attribute()
    }
    fn byte_len(&self) -> u64 {
        self.byte_len()
    }
}

#[derive(Default)]
struct Builds {
    running: Vec<u16>,
    failed: Vec<(u16, String)>,
}

pub(crate) struct LayerShelf<L> {
    held: ArcSwap<Vec<Arc<L>>>,
    builds: Mutex<Builds>,
}

impl<L: ShelvedLayer> LayerShelf<L> {
    pub fn new() -> LayerShelf<L> {
        LayerShelf {
            held: ArcSwap::from_pointee(Vec::new()),
            builds: Mutex::new(Builds::default()),
        }
    }

    pub fn get(&self, attribute: u16) -> Option<Arc<L>> {
        self.held
            .load()
            .iter()
            .find(|layer| layer.attribute() == attribute)
            .cloned()
    }

    /// The attributes held, ascending.
    pub fn attributes(&self) -> Vec<u16> {
        let mut held: Vec<u16> = self.held.load().iter().map(|l| l.attribute()).collect();
        held.sort_unstable();
        held
    }

    pub fn bytes(&self) -> u64 {
        self.held.load().iter().map(|l| l.byte_len()).sum()
    }

    /// Publishes `layer`, replacing one of the same attribute.
    pub fn add(&self, layer: L) {
        let layer = Arc::new(layer);
        self.held.rcu(|held| {
            let mut next: Vec<Arc<L>> = held
                .iter()
                .filter(|l| l.attribute() != layer.attribute())
                .cloned()
                .collect();
            next.push(layer.clone());
            next
        });
    }

    /// Unpublishes the layer of `attribute`; whether there was one.
    pub fn remove(&self, attribute: u16) -> bool {
        let mut removed = false;
        self.held.rcu(|held| {
            removed = held.iter().any(|l| l.attribute() == attribute);
            held.iter()
                .filter(|l| l.attribute() != attribute)
                .cloned()
                .collect::<Vec<_>>()
        });
        removed
    }

    /// Marks a build of `attribute` as running; false when the layer is held, being
    /// built, or failed to build.
    pub fn begin(&self, attribute: u16) -> bool {
        if self.get(attribute).is_some() {
            return false;
        }
        let mut builds = self.builds.lock().expect("layer builds");
        if builds.running.contains(&attribute) || builds.failed.iter().any(|(a, _)| *a == attribute)
        {
            return false;
        }
        builds.running.push(attribute);
        true
    }

    /// Ends the build [`LayerShelf::begin`] started: publishes the layer or keeps why
    /// it failed. (Under the builds' lock, so a layer is always running or settled.)
    pub fn finish(&self, attribute: u16, built: Result<L, String>) {
        let mut builds = self.builds.lock().expect("layer builds");
        match built {
            Ok(layer) => self.add(layer),
            Err(why) => builds.failed.push((attribute, why)),
        }
        builds.running.retain(|a| *a != attribute);
    }

    pub fn building(&self) -> Vec<u16> {
        self.builds.lock().expect("layer builds").running.clone()
    }

    pub fn failures(&self) -> Vec<(u16, String)> {
        self.builds.lock().expect("layer builds").failed.clone()
    }
}
