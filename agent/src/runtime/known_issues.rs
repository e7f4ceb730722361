//! Container runtime versions known to crash in the situation sandwatch
//! watches, in one table with their sources. Pure: a version string in,
//! the issues it is exposed to out. Versions that do not parse expose
//! nothing (unknown is 0, never a crash).

use std::cmp::Ordering;

/// A released version, major.minor.patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// Reads the leading `[v]MAJOR.MINOR.PATCH` of what runtimes report:
    /// `2.1.9+unknown` (Debian's 2.1.9), `v2.0.5`, `1.7.24~ds1`,
    /// `1.7.24-1`, `v2.0.4-12-gabcdef` (a git describe: commits after
    /// 2.0.4, still that line's code). Anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
        let mut parts = text[..end].split('.');
        let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
        let v = Version(next()?, next()?, next()?);
        parts.next().is_none().then_some(v)
    }
}

/// One known defect of a runtime: the half-open range of versions that
/// have it, where it was reported and fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownIssue {
    pub runtime: &'static str,
    /// The label value: `containerd#12038`.
    pub issue: &'static str,
    pub first: Version,
    /// The first release without it.
    pub fixed: Version,
    pub summary: &'static str,
    pub fixed_by: &'static str,
}

/// containerd v2.0.0 up to v2.0.5 crashed with a nil dereference in the
/// CRI's sandbox controller when a sandbox's TaskExit came after the
/// sandbox was torn down (issue 12038); fixed in v2.1.0 by PR 11588 and
/// in v2.0.6 by its backport, PR 12047.
pub const KNOWN_ISSUES: &[KnownIssue] = &[KnownIssue {
    runtime: "containerd",
    issue: "containerd#12038",
    first: Version(2, 0, 0),
    fixed: Version(2, 0, 6),
    summary: "NPE in podsandbox.handleSandboxTaskExit on a late sandbox TaskExit",
    fixed_by: "containerd#11588 (v2.1.0), containerd#12047 (v2.0.6)",
}];

impl KnownIssue {
    /// True when `version` is in [first, fixed).
    pub fn affects(&self, version: Version) -> bool {
        version.cmp(&self.first) != Ordering::Less && version < self.fixed
    }
}

/// For each known issue of `runtime`: the issue and whether the version
/// reported (`None` if it did not parse) has it.
pub fn exposure(runtime: &str, version: &str) -> Vec<(&'static KnownIssue, bool)> {
    let parsed = Version::parse(version);
    KNOWN_ISSUES.iter().filter(|i| i.runtime == runtime).map(|i| (i, parsed.is_some_and(|v| i.affects(v)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_runtimes_report_them() {
        for (text, want) in [
            ("2.1.9+unknown", Some(Version(2, 1, 9))),
            ("v2.0.5", Some(Version(2, 0, 5))),
            ("1.7.24~ds1", Some(Version(1, 7, 24))),
            ("1.6.20~ds1-1+deb12u3", Some(Version(1, 6, 20))),
            ("v2.0.4-12-gabcdef0", Some(Version(2, 0, 4))),
            ("2.0.0-rc.1", Some(Version(2, 0, 0))),
            (" 1.7.0 ", Some(Version(1, 7, 0))),
            ("2.0", None),
            ("1.2.3.4", None),
            ("", None),
            ("garbage", None),
            ("v", None),
            ("99999999999.0.0", None),
            ("abcdef0", None),
        ] {
            assert_eq!(Version::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn containerd_2_0_0_to_2_0_5_is_exposed_to_12038() {
        let exposed = |v: &str| exposure("containerd", v).iter().any(|(i, on)| i.issue == "containerd#12038" && *on);
        for v in ["2.0.0", "v2.0.3", "2.0.5", "2.0.5+unknown", "2.0.0-rc.2"] {
            assert!(exposed(v), "{v}");
        }
        for v in ["1.7.24~ds1", "1.6.20", "2.0.6", "2.1.0", "2.1.9+unknown", "3.0.0", "garbage", ""] {
            assert!(!exposed(v), "{v}");
        }
        // Every runtime with a table entry gets a series, exposed or not.
        assert_eq!(exposure("containerd", "garbage").len(), 1);
        assert!(exposure("cri-o", "1.30.0").is_empty());
    }
}
