//! The machine's local time zone, found without listing the whole zoneinfo database.
//!
//! `jiff::Zoned::now()` looks the zone's name up in its database, and the first lookup walks
//! every directory under `/usr/share/zoneinfo` to learn the names there (about half a
//! millisecond, on every start). Where `/etc/localtime` is a link into a zoneinfo directory, the
//! name is in the link and the rules are in the file it points to, so both are read from there;
//! anything else (a `TZ` variable, a copied file, another platform) is left to jiff. The zone is
//! found once per process.
//!
//! ```
//! let now = talaria_store::local_time::now();
//! assert_eq!(now.time_zone(), &talaria_store::local_time::zone());
//! ```

use std::sync::OnceLock;

use jiff::Zoned;
use jiff::tz::TimeZone;

/// The local time zone.
pub fn zone() -> TimeZone {
    static ZONE: OnceLock<TimeZone> = OnceLock::new();
    ZONE.get_or_init(|| linked("/etc/localtime").unwrap_or_else(TimeZone::system)).clone()
}

/// Now, in the local time zone (`Zoned::now()` would look the system zone up again first).
pub fn now() -> Zoned {
    jiff::Timestamp::now().to_zoned(zone())
}

/// The zone `path` links to, when no `TZ` overrides it and the link names a zoneinfo file.
fn linked(path: &str) -> Option<TimeZone> {
    if std::env::var_os("TZ").is_some_and(|tz| !tz.is_empty()) {
        return None;
    }
    let target = std::fs::read_link(path).ok()?;
    let target = target.to_str()?;
    let (_, name) = target.rsplit_once("zoneinfo/")?;
    let data = std::fs::read(path).ok()?;
    TimeZone::tzif(name, &data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_into_zoneinfo_names_the_zone_and_gives_its_rules() {
        let Ok(target) = std::fs::read_link("/etc/localtime") else { return };
        if std::env::var_os("TZ").is_some() || !target.to_string_lossy().contains("zoneinfo/") {
            return;
        }
        let zone = linked("/etc/localtime").expect("a zone");
        let name = target.to_string_lossy().rsplit_once("zoneinfo/").map(|(_, n)| n.to_string()).expect("name");
        assert_eq!(zone.iana_name(), Some(name.as_str()));
        let system = TimeZone::system();
        let t = jiff::Timestamp::from_second(1_780_000_000).expect("timestamp");
        assert_eq!(zone.to_offset(t), system.to_offset(t));
    }

    #[test]
    fn a_path_that_is_not_a_link_is_left_to_jiff() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("localtime");
        std::fs::write(&file, b"not tzif").expect("write");
        assert!(linked(file.to_str().expect("utf-8")).is_none());
    }
}
