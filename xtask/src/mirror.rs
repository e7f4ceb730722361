//! A copy of the workspace's files that a task may change freely (`cargo
//! xtask mutants` builds mutations in one): after `sync`, each listed file
//! is in the copy with the tree's bytes, mode and modification time, and
//! nothing else is. Nothing here ever writes under the tree.
//!
//! The times are the tree's so that cargo, sharing one target directory
//! between the tree and the copy, finds the crates it builds from both
//! (same relative paths, same hashes) exactly as fresh in the copy as in the
//! tree, and builds nothing again for them.

use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::util::output;

/// What `sync` changed in the copy.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Files written, or whose mode or time was set back.
    pub refreshed: usize,
    /// Files and directories that were not the tree's.
    pub removed: usize,
}

/// The files of the workspace at `root`, relative to it: those git tracks
/// and those it would track (new files not yet added; a new module builds in
/// the copy as in the tree), but none under `skip` (the target directory,
/// which holds the copy).
pub fn workspace_files(root: &Path, skip: &Path) -> Result<Vec<PathBuf>> {
    let listed = output(
        Command::new("git").args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"]).current_dir(root),
    )
    .context("`git ls-files` failed: is this a git checkout?")?;
    let skip = skip.strip_prefix(root).ok().filter(|s| !s.as_os_str().is_empty());
    let files: BTreeSet<PathBuf> = listed
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .filter(|p| skip.is_none_or(|s| !p.starts_with(s)))
        .collect();
    Ok(files.into_iter().collect())
}

/// Makes `copy` hold exactly `files` (relative paths) as they are under
/// `tree`. A file's content is always compared, never trusted from its size
/// and time: a run killed with a change in the copy leaves the time it
/// likes. A listed file missing from the tree (deleted, not yet committed)
/// is left out.
pub fn sync(tree: &Path, copy: &Path, files: &[PathBuf]) -> Result<Synced> {
    let mut sources = Vec::new();
    let mut kept = BTreeSet::new();
    for rel in files {
        if rel.is_absolute() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            bail!("{} is not a path inside the workspace", rel.display());
        }
        let from = tree.join(rel);
        // A link is copied as the file it names.
        let Ok(meta) = fs::metadata(&from) else { continue };
        if meta.is_file() {
            kept.extend(rel.ancestors().filter(|a| !a.as_os_str().is_empty()).map(Path::to_path_buf));
            sources.push((from, meta, copy.join(rel)));
        }
    }
    // First, so that the copy holds no link, and no write into it can
    // follow one into the tree.
    let mut synced = Synced { refreshed: 0, removed: prune(copy, Path::new(""), &kept)? };
    for (from, meta, to) in sources {
        if copy_file(&from, &meta, &to)? {
            synced.refreshed += 1;
        }
    }
    Ok(synced)
}

/// Makes `to` the regular file `from` is, with its mode and time; returns
/// whether anything had to change.
fn copy_file(from: &Path, meta: &fs::Metadata, to: &Path) -> Result<bool> {
    let bytes = fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    let modified = meta.modified()?;
    let current = fs::symlink_metadata(to).ok().filter(fs::Metadata::is_file);
    let same_bytes = current.is_some() && fs::read(to).is_ok_and(|b| b == bytes);
    if same_bytes
        && current
            .as_ref()
            .is_some_and(|c| c.permissions().mode() & 0o7777 == mode && c.modified().ok() == Some(modified))
    {
        return Ok(false);
    }
    if !same_bytes {
        // A new file, so that a read-only one (or a directory) in the way
        // does not stop the write.
        remove(to)?;
        create_parent(to)?;
        fs::write(to, &bytes).with_context(|| format!("cannot write {}", to.display()))?;
    }
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    fs::File::open(to)
        .and_then(|f| f.set_modified(modified))
        .with_context(|| format!("cannot set the time of {}", to.display()))?;
    Ok(true)
}

fn create_parent(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    Ok(())
}

/// Removes whatever is at `path` (a file, a link or a directory tree).
fn remove(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path).with_context(|| format!("cannot remove {}", path.display())),
        Ok(_) => fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display())),
    }
}

/// Removes from `copy/dir` every link and everything that is neither a
/// kept file nor a directory holding one; returns how many entries went.
fn prune(copy: &Path, dir: &Path, kept: &BTreeSet<PathBuf>) -> Result<usize> {
    let mut removed = 0;
    let Ok(entries) = fs::read_dir(copy.join(dir)) else { return Ok(0) };
    for entry in entries {
        let entry = entry?;
        let rel = dir.join(entry.file_name());
        let kind = entry.file_type()?;
        if !kept.contains(&rel) || kind.is_symlink() {
            remove(&entry.path())?;
            removed += 1;
        } else if kind.is_dir() {
            removed += prune(copy, &rel, kept)?;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    /// A directory of its own under the system's temporary directory,
    /// removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("xtask-mirror-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, text: &str, modified: SystemTime) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        fs::File::options().write(true).open(path).unwrap().set_modified(modified).unwrap();
    }

    fn modified(path: &Path) -> SystemTime {
        fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn the_copy_gets_the_trees_bytes_modes_and_times_and_nothing_else() {
        let scratch = Scratch::new("copy");
        let (tree, copy) = (scratch.0.join("tree"), scratch.0.join("copy"));
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        write(&tree.join("src/lib.rs"), "pub fn f() {}\n", old);
        write(&tree.join("run"), "#!/bin/sh\n", old);
        fs::set_permissions(tree.join("run"), fs::Permissions::from_mode(0o755)).unwrap();
        write(&tree.join("ignored.txt"), "not listed\n", old);
        write(&copy.join("stale/extra.rs"), "left by an older tree\n", old);
        write(&copy.join("src/gone.rs"), "deleted in the tree\n", old);
        std::os::unix::fs::symlink(tree.join("src/lib.rs"), tree.join("link.rs")).unwrap();
        let files = ["src/lib.rs", "run", "deleted.rs", "link.rs"].map(PathBuf::from);

        let synced = sync(&tree, &copy, &files).unwrap();
        assert_eq!(synced, Synced { refreshed: 3, removed: 2 });
        let link = fs::symlink_metadata(copy.join("link.rs")).unwrap();
        assert!(link.is_file(), "a link in the tree is a file in the copy, so no write follows it into the tree");
        assert_eq!(fs::read_to_string(copy.join("link.rs")).unwrap(), "pub fn f() {}\n");
        assert_eq!(fs::read_to_string(copy.join("src/lib.rs")).unwrap(), "pub fn f() {}\n");
        assert_eq!(modified(&copy.join("src/lib.rs")), old);
        assert_eq!(fs::metadata(copy.join("run")).unwrap().permissions().mode() & 0o777, 0o755);
        assert!(!copy.join("ignored.txt").exists() && !copy.join("stale").exists());
        assert!(!copy.join("src/gone.rs").exists() && !copy.join("deleted.rs").exists());
        // A second sync of an unchanged tree changes nothing.
        assert_eq!(sync(&tree, &copy, &files).unwrap(), Synced::default());

        // A link in the copy, where a write would land in the tree, goes.
        fs::rename(copy.join("src"), scratch.0.join("moved")).unwrap();
        std::os::unix::fs::symlink(tree.join("src"), copy.join("src")).unwrap();
        assert_eq!(sync(&tree, &copy, &files).unwrap(), Synced { refreshed: 1, removed: 1 });
        assert!(fs::symlink_metadata(copy.join("src")).unwrap().is_dir());
        fs::write(copy.join("src/lib.rs"), "mutated").unwrap();
        assert_eq!(fs::read_to_string(tree.join("src/lib.rs")).unwrap(), "pub fn f() {}\n");
    }

    /// A run killed with a mutation in the copy: the content is compared,
    /// so a change of the same size and time is found and undone.
    #[test]
    fn a_change_in_the_copy_is_undone_even_at_the_same_size_and_time() {
        let scratch = Scratch::new("stale");
        let (tree, copy) = (scratch.0.join("tree"), scratch.0.join("copy"));
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        write(&tree.join("src/lib.rs"), "if n <= clear {}\n", old);
        let files = [PathBuf::from("src/lib.rs")];
        sync(&tree, &copy, &files).unwrap();

        write(&copy.join("src/lib.rs"), "if n <  clear {}\n", old);
        assert_eq!(sync(&tree, &copy, &files).unwrap().refreshed, 1);
        assert_eq!(fs::read_to_string(copy.join("src/lib.rs")).unwrap(), "if n <= clear {}\n");
        assert_eq!(modified(&copy.join("src/lib.rs")), old);

        // Restored bytes at a later time: only the time is set back.
        write(&copy.join("src/lib.rs"), "if n <= clear {}\n", SystemTime::now());
        assert_eq!(sync(&tree, &copy, &files).unwrap().refreshed, 1);
        assert_eq!(modified(&copy.join("src/lib.rs")), old);

        // A directory where the tree has a file.
        fs::remove_file(copy.join("src/lib.rs")).unwrap();
        fs::create_dir_all(copy.join("src/lib.rs/x")).unwrap();
        sync(&tree, &copy, &files).unwrap();
        assert_eq!(fs::read_to_string(copy.join("src/lib.rs")).unwrap(), "if n <= clear {}\n");
    }

    #[test]
    fn a_path_out_of_the_workspace_is_refused() {
        let scratch = Scratch::new("escape");
        let err = sync(&scratch.0.join("tree"), &scratch.0.join("copy"), &[PathBuf::from("../x")]).unwrap_err();
        assert!(err.to_string().contains("not a path inside the workspace"), "{err}");
    }
}
