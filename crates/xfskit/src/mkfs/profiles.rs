//! The on-disk feature defaults of each xfsprogs release line, as
//! mkfs.xfs's own `lts_*.conf` files give them (`-c options=FILE`):
//! `--defaults VERSION` picks one, so that an image made today mounts on
//! the kernel of that release. Options on the command line (and in a
//! `-c options=` file) override the profile.

use super::features::FeatureSet;
use super::options::MkfsError;

/// An xfsprogs release line whose defaults mkfs follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Defaults {
    /// Linux/xfsprogs 4.19: no reflink, no bigtime.
    V4_19,
    /// 5.4.
    V5_4,
    /// 5.10.
    V5_10,
    /// 5.15: bigtime and inode btree counters.
    V5_15,
    /// 6.1 (Debian 12's mkfs.xfs).
    V6_1,
    /// 6.6: reverse mapping and large extent counters.
    V6_6,
    /// 6.12.
    V6_12,
    /// 6.18: parent pointers and exchange-range.
    V6_18,
    /// xfsprogs 7.2, the newest release (the default, as a plain mkfs.xfs
    /// of today makes): 6.18's features, and the root directory's
    /// `xfs:autofsck` attribute set to `repair` when reverse mapping and
    /// parent pointers are both on.
    #[default]
    V7_2,
}

/// Every profile with the version text `--defaults` takes.
pub const ALL: &[(&str, Defaults)] = &[
    ("4.19", Defaults::V4_19),
    ("5.4", Defaults::V5_4),
    ("5.10", Defaults::V5_10),
    ("5.15", Defaults::V5_15),
    ("6.1", Defaults::V6_1),
    ("6.6", Defaults::V6_6),
    ("6.12", Defaults::V6_12),
    ("6.18", Defaults::V6_18),
    ("7.2", Defaults::V7_2),
];

impl Defaults {
    /// Parses a release given to `--defaults` ("6.1", "7.2"; a later
    /// release than the newest known takes the newest profile).
    pub fn parse(text: &str) -> Result<Defaults, MkfsError> {
        if let Some((_, d)) = ALL.iter().find(|(v, _)| *v == text) {
            return Ok(*d);
        }
        let num = |t: &str| -> Option<(u32, u32)> {
            let (a, b) = t.split_once('.')?;
            Some((a.parse().ok()?, b.split('.').next()?.parse().ok()?))
        };
        match num(text) {
            Some(v) if v > (7, 2) => Ok(Defaults::V7_2),
            Some(v) if v >= (4, 19) => {
                // The newest profile at or before the release asked for.
                let mut best = Defaults::V4_19;
                for (t, d) in ALL {
                    if num(t).is_some_and(|p| p <= v) {
                        best = *d;
                    }
                }
                Ok(best)
            }
            _ => Err(MkfsError::BadOption(format!(
                "unknown --defaults release {text} (known: {})",
                ALL.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// The features this release's mkfs.xfs turns on by default.
    pub fn features(self) -> FeatureSet {
        use Defaults::*;
        let at_least = |d: Defaults| self as u8 >= d as u8;
        FeatureSet {
            finobt: true,
            sparse: true,
            rmapbt: at_least(V6_6),
            reflink: at_least(V5_4),
            bigtime: at_least(V5_15),
            inobtcount: at_least(V5_15),
            nrext64: at_least(V6_6),
            parent: at_least(V6_18),
            exchange: at_least(V6_18),
            metadir: false,
            // A marker: this release records a policy of its own choosing.
            autofsck: at_least(V7_2).then_some(super::features::Autofsck::Repair),
            qflags: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_follow_the_lts_files() {
        let f = Defaults::V6_18.features();
        assert!(f.parent && f.exchange && f.rmapbt && f.nrext64 && f.reflink);
        let f = Defaults::V6_1.features();
        assert!(!f.parent && !f.exchange && !f.rmapbt && !f.nrext64 && f.bigtime);
        let f = Defaults::V5_10.features();
        assert!(f.reflink && !f.bigtime && !f.inobtcount);
        assert!(!Defaults::V4_19.features().reflink);
        assert_eq!(Defaults::parse("6.12").unwrap(), Defaults::V6_12);
        assert_eq!(Defaults::parse("6.9").unwrap(), Defaults::V6_6);
        assert_eq!(Defaults::parse("7.2").unwrap(), Defaults::V7_2);
        assert_eq!(Defaults::parse("7.1").unwrap(), Defaults::V6_18);
        assert_eq!(Defaults::parse("8.0").unwrap(), Defaults::V7_2);
        assert_eq!(Defaults::default(), Defaults::V7_2);
        assert!(Defaults::parse("3.10").is_err());
        assert!(Defaults::parse("new").is_err());
    }
}
