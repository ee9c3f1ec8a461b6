//! Plugin identity: whose data is whose.
//!
//! A plugin's key-value data and `$PLUGIN_DATA` belong to an identity, never to the bare name it
//! claims:
//! - a bundled plugin is its name (`journal`);
//! - an installed plugin is its scope, name and publisher: the key that signed it
//!   (`user/weather@key:0123456789abcdef`), or, for one installed unsigned, the digest of the bundle
//!   it was first installed from (`user/notes@unsigned:9f86d081884c`);
//! - a plugin placed by hand is its scope and name (`user/notes@local`).
//!
//! So a plugin that takes another's name (a bundled plugin's, or an installed one's under another
//! key) starts with no data: it can never read what the other stored. Grants follow the same
//! rule: an installed plugin's live in its lockfile entry, which an update from another publisher
//! does not inherit (see `talaria-market`'s install), and a project plugin's grants are per project.
//!
//! ```
//! use talaria_runtime::{Scope, identity};
//! assert_eq!(identity::kv_space(&Scope::Bundled, "journal", None), "journal");
//! assert_eq!(identity::kv_space(&Scope::User, "journal", Some("key:0123456789abcdef")), "user/journal@key:0123456789abcdef");
//! assert_eq!(identity::kv_space(&Scope::User, "notes", None), "user/notes@local");
//! ```

use crate::grant::Scope;

/// The key-value space (and `$PLUGIN_DATA` name) of plugin `name` in `scope`, published by
/// `publisher` (`None`: placed by hand).
pub fn kv_space(scope: &Scope, name: &str, publisher: Option<&str>) -> String {
    let publisher = publisher.unwrap_or("local");
    match scope {
        Scope::Bundled => name.to_string(),
        Scope::User => format!("user/{name}@{publisher}"),
        Scope::Project(_) => format!("{}/{name}@{publisher}", scope.key()),
    }
}

/// Where the same plugin's data was kept before identities (by name, which a bundled plugin of
/// that name shared): `None` when nothing there can safely be taken over.
pub(crate) fn legacy_space(scope: &Scope, name: &str, bundled_names: &[&str]) -> Option<String> {
    match scope {
        Scope::Bundled => None,
        Scope::User if bundled_names.contains(&name) => None,
        Scope::User => Some(name.to_string()),
        Scope::Project(_) => Some(format!("{}/{name}", scope.key())),
    }
}
