//! Packages from other Debian suites (bullseye, trixie, sid), fetched with
//! a private apt configuration under `target/debs/<suite>/` — its own
//! sources list, package lists and cache — and unpacked with `dpkg -x`.
//! Nothing is installed and the system's apt state is never touched.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::util::{download, output, run as run_cmd};

/// Signs every suite's Release file; Debian's own keyring package.
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Used when the system's sources name no Debian mirror.
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// One suite's private apt state; the system's own release uses the
/// system's apt sources (its updates and security suites carry the
/// current kernels) and only unpacks under `target/debs/`.
pub struct Suite {
    name: String,
    dir: PathBuf,
    system: bool,
}

impl Suite {
    /// The suite `name` with its state under `root/target/debs/<name>`.
    pub fn new(root: &Path, name: &str) -> Self {
        let system = system_codename().as_deref() == Some(name);
        Self { name: name.to_string(), dir: root.join("target/debs").join(name), system }
    }

    fn apt_options(&self) -> Vec<String> {
        if self.system {
            return vec!["-o=APT::Sandbox::User=root".to_string(), "-q".to_string()];
        }
        let d = self.dir.display();
        vec![
            format!("-o=Dir::Etc::SourceList={d}/sources.list"),
            "-o=Dir::Etc::SourceParts=/dev/null".to_string(),
            format!("-o=Dir::State::Lists={d}/lists"),
            format!("-o=Dir::State::Status={d}/status"),
            format!("-o=Dir::Cache={d}/cache"),
            "-o=Debug::NoLocking=1".to_string(),
            // Downloads land in our own directory, which _apt cannot write.
            "-o=APT::Sandbox::User=root".to_string(),
            "-q".to_string(),
        ]
    }

    /// Writes the sources list and fetches the package lists, unless
    /// they were fetched already and `fresh` is not asked for.
    fn update(&self, fresh: bool) -> Result<()> {
        if self.system {
            return if fresh {
                download("apt-get update", || {
                    let mut cmd = Command::new("apt-get");
                    cmd.args(["update", "-qq"]);
                    cmd
                })
            } else {
                Ok(())
            };
        }
        let lists = self.dir.join("lists");
        let fetched = std::fs::read_dir(&lists)
            .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().contains("_Packages")))
            .unwrap_or(false);
        if fetched && !fresh {
            return Ok(());
        }
        for sub in ["lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(self.dir.join(sub))
                .with_context(|| format!("cannot create {}", self.dir.display()))?;
        }
        // An empty dpkg status: this apt knows nothing installed.
        std::fs::write(self.dir.join("status"), "")?;
        let line = format!("deb [signed-by={KEYRING}] {} {} main\n", system_mirror(), self.name);
        std::fs::write(self.dir.join("sources.list"), line)?;
        eprintln!("debs: fetching the package lists of Debian {}", self.name);
        download(&format!("fetching the package lists of Debian {}", self.name), || {
            let mut cmd = Command::new("apt-get");
            cmd.args(self.apt_options()).arg("update");
            cmd
        })
    }

    /// The version this suite carries of `package`.
    pub fn version(&self, package: &str) -> Result<String> {
        self.update(false)?;
        let policy = output(Command::new("apt-cache").args(self.apt_options()).args(["policy", package]))
            .with_context(|| format!("apt-cache policy {package} failed for Debian {}", self.name))?;
        candidate(&policy).with_context(|| format!("Debian {} has no package {package}", self.name))
    }

    /// What `package` depends on (package names, alternatives left out).
    pub fn depends(&self, package: &str) -> Result<Vec<String>> {
        self.update(false)?;
        let text = output(Command::new("apt-cache").args(self.apt_options()).args(["depends", package]))
            .with_context(|| format!("Debian {} knows no package {package}", self.name))?;
        Ok(text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .map(str::trim)
            .filter(|d| !d.starts_with('<') && !d.contains(' '))
            .map(str::to_string)
            .collect())
    }

    /// `package` unpacked (once per version) into
    /// `target/debs/<suite>/<package>-<version>`; returns that directory.
    pub fn unpacked(&self, package: &str) -> Result<PathBuf> {
        match self.unpack(package) {
            Ok(dest) => Ok(dest),
            Err(e) => {
                // The suite moved on since its lists were fetched: the
                // version they name is gone from the mirror.
                eprintln!("debs: {e:#}; fetching the lists of Debian {} again", self.name);
                self.update(true)?;
                self.unpack(package)
            }
        }
    }

    fn unpack(&self, package: &str) -> Result<PathBuf> {
        let version = self.version(package)?;
        let dest = self.dir.join(format!("{package}-{}", version.replace([':', '~', '+'], "_")));
        if dest.join(".complete").exists() {
            return Ok(dest);
        }
        let downloads = self.dir.join("downloads");
        std::fs::create_dir_all(&downloads)?;
        eprintln!("debs: downloading {package} {version} from Debian {}", self.name);
        download(&format!("downloading {package} {version} from Debian {}", self.name), || {
            let mut cmd = Command::new("apt-get");
            cmd.args(self.apt_options()).args(["download", &format!("{package}={version}")]).current_dir(&downloads);
            cmd
        })?;
        let deb = std::fs::read_dir(&downloads)?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(&format!("{package}_")) && n.ends_with(".deb")
                })
            })
            .with_context(|| format!("apt-get download left no {package}_*.deb in {}", downloads.display()))?;
        let staging = self.dir.join(format!("{package}.partial"));
        let _ = std::fs::remove_dir_all(&staging);
        run_cmd(Command::new("dpkg").arg("-x").arg(&deb).arg(&staging))?;
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::rename(&staging, &dest)?;
        std::fs::write(dest.join(".complete"), &version)?;
        let _ = std::fs::remove_file(&deb);
        Ok(dest)
    }
}

/// The system's Debian release (`VERSION_CODENAME` of /etc/os-release).
fn system_codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// The Debian mirror the system's own apt sources use.
fn system_mirror() -> String {
    let mut text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".sources") || name.ends_with(".list") {
                text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                text.push('\n');
            }
        }
    }
    mirror_in(&text).unwrap_or_else(|| DEFAULT_MIRROR.to_string())
}

/// The first `http(s)://…/debian` URI in apt sources (one-line or deb822).
fn mirror_in(sources: &str) -> Option<String> {
    sources
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .find(|w| {
            (w.starts_with("http://") || w.starts_with("https://")) && w.trim_end_matches('/').ends_with("/debian")
        })
        .map(|w| w.trim_end_matches('/').to_string())
}

/// The `Candidate:` of `apt-cache policy` output.
fn candidate(policy: &str) -> Option<String> {
    policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(str::trim)
        .filter(|v| !v.is_empty() && *v != "(none)")
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_comes_from_either_source_format() {
        let deb822 = "Types: deb\n# http://snapshot.debian.org/archive/debian/2025\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n";
        assert_eq!(mirror_in(deb822).as_deref(), Some("http://deb.debian.org/debian"));
        let one_line = "deb https://packages.cloud.google.com/apt cloud-sdk main\ndeb http://mirror.example/debian/ bookworm main\n";
        assert_eq!(mirror_in(one_line).as_deref(), Some("http://mirror.example/debian"));
        assert_eq!(mirror_in("deb https://deb.nodesource.com/node_20.x nodistro main"), None);
    }

    #[test]
    fn the_candidate_version_is_read_from_apt_cache_policy() {
        let policy = "containerd:\n  Installed: 1.6.20~ds1-1+deb12u3\n  Candidate: 2.1.9+ds1-5\n  Version table:\n";
        assert_eq!(candidate(policy).as_deref(), Some("2.1.9+ds1-5"));
        assert_eq!(candidate("x:\n  Installed: (none)\n  Candidate: (none)\n"), None);
    }
}
