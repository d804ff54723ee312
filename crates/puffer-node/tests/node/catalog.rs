//! Every catalog implementation of the node passes the one conformance suite.

use std::path::PathBuf;

use puffer_node::catalog::conformance::{self, Harness};
use puffer_node::catalog::{Catalog, FileCatalog, MemoryCatalog};

struct Memory;

impl Harness for Memory {
    fn fresh(&mut self) -> Box<dyn Catalog> {
        Box::new(MemoryCatalog::new())
    }

    fn reopen(&mut self) -> Option<Box<dyn Catalog>> {
        None
    }
}

struct Files {
    root: tempfile::TempDir,
    made: usize,
    last: Option<PathBuf>,
}

impl Harness for Files {
    fn fresh(&mut self) -> Box<dyn Catalog> {
        self.made += 1;
        let dir = self.root.path().join(format!("catalog-{}", self.made));
        std::fs::create_dir_all(&dir).unwrap();
        self.last = Some(dir.clone());
        Box::new(FileCatalog::create(&dir).unwrap())
    }

    fn reopen(&mut self) -> Option<Box<dyn Catalog>> {
        let dir = self.last.as_ref()?;
        Some(Box::new(
            FileCatalog::open(dir).unwrap().expect("a catalog"),
        ))
    }
}

#[test]
fn the_memory_catalog_conforms() {
    conformance::run(&mut Memory);
}

#[test]
fn the_file_catalog_conforms() {
    conformance::run(&mut Files {
        root: tempfile::tempdir().unwrap(),
        made: 0,
        last: None,
    });
}
