//! The tool catalog: naming, schema repair, fingerprints, cache and the immutable snapshot.
