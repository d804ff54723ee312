//! `puffer-index`: a compressed suffix array over arbitrary bytes that answers
//! count, search, extract, range and wildcard queries without decompressing
//! (Succinct), with SA and ISA samples in Layered Sampled Arrays whose layers are
//! added and dropped while queries run (BlowFish).
//!
//! ```
//! use puffer_index::TextIndex;
//! let index = TextIndex::build(b"banana bandana").unwrap();
//! assert_eq!(index.count(b"ana").unwrap(), 3);
//! assert_eq!(index.search(b"ban", None).unwrap(), vec![0, 7]);
//! assert_eq!(index.extract(7, 4).unwrap(), b"band");
//! ```

pub mod bits;
pub mod build;
pub mod error;
mod format;
pub mod huffman;
mod index;
pub mod lsa;
pub mod psi;
mod query;

pub use build::{BuildOptions, BuildPhase, MAX_TEXT_BYTES};
pub use error::{IndexError, Result};
pub use format::{FORMAT_VERSION, MAGIC};
pub use index::{
    Construction, Footprint, LayerFootprint, TextIndex, WildcardMatch, MAX_PATTERN_BYTES,
};
