//! Plugin bundles in an OCI registry (placeholder: being written).
