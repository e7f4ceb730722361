//! tracefs: where it is mounted (mounting it when missing) and the field
//! offsets of the tracepoints the programs read, parsed from `format` files.
//! Offsets differ between kernels; nothing here is hard-coded.

use std::{
    collections::HashMap,
    ffi::CString,
    path::{Path, PathBuf},
};

use agent_common::{TracepointOffsets, ABSENT};

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error("tracefs is not mounted at {path} and mounting it failed: {reason}{hint}", hint = mount_hint(*.denied))]
    Mount {
        path: PathBuf,
        reason: String,
        /// Not allowed to mount (no CAP_SYS_ADMIN, as in the DaemonSet).
        denied: bool,
    },
    #[error("tracepoint {0} is missing on this kernel (no {1})")]
    MissingTracepoint(&'static str, PathBuf),
    #[error("tracepoint {tracepoint} has no field {field} (kernel layout not supported)")]
    MissingField { tracepoint: &'static str, field: &'static str },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("malformed format file {path}: line {line:?}")]
    Malformed { path: PathBuf, line: String },
}

/// What to do when mounting was not allowed: the node must have it.
fn mount_hint(denied: bool) -> &'static str {
    if denied {
        "; mount it on the node (`mount -t tracefs nodev /sys/kernel/tracing`; systemd does at boot): \
         in a container the agent uses the node's tracefs and has no CAP_SYS_ADMIN to mount one"
    } else {
        ""
    }
}

/// One field of a tracepoint record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// Parses the text of a tracepoint `format` file into name → field.
///
/// Lines look like `\tfield:unsigned long total_vm;\toffset:16;\tsize:8;\tsigned:0;`.
/// The name is the last word of the declaration, without any `[N]` suffix.
pub fn parse_format(text: &str) -> Result<HashMap<String, Field>, String> {
    let mut fields = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or_default();
        let mut offset = None;
        let mut size = None;
        for part in parts {
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse::<u32>().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse::<u32>().ok();
            }
        }
        let name = decl
            .rsplit(|c: char| c.is_whitespace() || c == '*')
            .next()
            .map(|n| n.split('[').next().unwrap_or(n))
            .filter(|n| !n.is_empty());
        match (name, offset, size) {
            (Some(name), Some(offset), Some(size)) => {
                fields.insert(name.to_string(), Field { offset, size });
            }
            _ => return Err(line.to_string()),
        }
    }
    Ok(fields)
}

/// A mounted tracefs.
#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
}

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

impl Tracefs {
    /// Finds tracefs, mounting it at /sys/kernel/tracing when it is missing.
    pub fn find_or_mount() -> Result<Self, TracefsError> {
        if let Some(root) = CANDIDATES.iter().map(PathBuf::from).find(|p| p.join("events").is_dir()) {
            return Ok(Self { root });
        }
        let target = PathBuf::from(CANDIDATES[0]);
        mount_tracefs(&target).map_err(|e| TracefsError::Mount {
            path: target.clone(),
            reason: e.to_string(),
            denied: e.kind() == std::io::ErrorKind::PermissionDenied,
        })?;
        Ok(Self { root: target })
    }

    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Fields of `category/name`; a missing tracepoint is a typed error.
    pub fn fields(&self, tracepoint: &'static str) -> Result<HashMap<String, Field>, TracefsError> {
        let path = self.root.join("events").join(tracepoint).join("format");
        if !path.exists() {
            return Err(TracefsError::MissingTracepoint(tracepoint, path));
        }
        let text =
            std::fs::read_to_string(&path).map_err(|source| TracefsError::Read { path: path.clone(), source })?;
        parse_format(&text).map_err(|line| TracefsError::Malformed { path, line })
    }

    /// Offsets of the exit and OOM tracepoints' fields the programs read
    /// (the cgroup programs read the kernel's structs, at BTF's offsets).
    pub fn offsets(&self) -> Result<TracepointOffsets, TracefsError> {
        let exit = Lookup::new(EXIT, self.fields(EXIT)?);
        let oom = Lookup::new(OOM, self.fields(OOM)?);
        // Where it is missing, no program watches execs (see the loader).
        let exec = Lookup::new(EXEC, self.fields(EXEC).unwrap_or_default());
        Ok(TracepointOffsets {
            exit_comm: exit.required("comm")?,
            exit_pid: exit.required("pid")?,
            exit_group_dead: exit.optional("group_dead"),
            mv_pid: oom.required("pid")?,
            // Added in Linux 6.8; older kernels only carry the pid.
            mv_comm: oom.optional("comm"),
            mv_total_vm: oom.optional("total_vm"),
            mv_anon_rss: oom.optional("anon_rss"),
            mv_file_rss: oom.optional("file_rss"),
            mv_shmem_rss: oom.optional("shmem_rss"),
            mv_uid: oom.optional("uid"),
            mv_pgtables: oom.optional("pgtables"),
            mv_oom_score_adj: oom.optional("oom_score_adj"),
            exec_pid: exec.optional("pid"),
            exec_old_pid: exec.optional("old_pid"),
        })
    }
}

pub const EXIT: &str = "sched/sched_process_exit";
pub const OOM: &str = "oom/mark_victim";
pub const EXEC: &str = "sched/sched_process_exec";

struct Lookup {
    tracepoint: &'static str,
    fields: HashMap<String, Field>,
}

impl Lookup {
    fn new(tracepoint: &'static str, fields: HashMap<String, Field>) -> Self {
        Self { tracepoint, fields }
    }

    fn optional(&self, field: &str) -> u32 {
        self.fields.get(field).map_or(ABSENT, |f| f.offset)
    }

    fn required(&self, field: &'static str) -> Result<u32, TracefsError> {
        self.fields
            .get(field)
            .map(|f| f.offset)
            .ok_or(TracefsError::MissingField { tracepoint: self.tracepoint, field })
    }
}

fn mount_tracefs(target: &Path) -> std::io::Result<()> {
    let to_c = |s: &str| CString::new(s).map_err(std::io::Error::other);
    let target_c = to_c(&target.to_string_lossy())?;
    let fstype = to_c("tracefs")?;
    let source = to_c("nodev")?;
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    let rc = unsafe { libc::mount(source.as_ptr(), target_c.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARK_VICTIM: &str = "name: mark_victim\nID: 517\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:__data_loc char[] comm;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long total_vm;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:short oom_score_adj;\toffset:64;\tsize:2;\tsigned:1;\n\
\nprint fmt: \"pid=%d\", REC->pid\n";

    #[test]
    fn parses_scalar_data_loc_and_array_fields() {
        let f = parse_format(MARK_VICTIM).unwrap();
        assert_eq!(f["pid"], Field { offset: 8, size: 4 });
        assert_eq!(f["comm"], Field { offset: 12, size: 4 });
        assert_eq!(f["total_vm"], Field { offset: 16, size: 8 });
        assert_eq!(f["oom_score_adj"], Field { offset: 64, size: 2 });
        assert_eq!(f["common_type"], Field { offset: 0, size: 2 });
        let exit = parse_format("\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n").unwrap();
        assert_eq!(exit["comm"], Field { offset: 8, size: 16 });
    }

    #[test]
    fn old_kernel_mark_victim_has_only_pid() {
        let old = "\tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n";
        let l = Lookup::new(OOM, parse_format(old).unwrap());
        assert_eq!(l.required("pid").unwrap(), 8);
        assert_eq!(l.optional("comm"), ABSENT);
        let err = l.required("comm").unwrap_err().to_string();
        assert_eq!(err, "tracepoint oom/mark_victim has no field comm (kernel layout not supported)");
    }

    #[test]
    fn malformed_field_line_is_an_error() {
        assert!(parse_format("\tfield:int pid;\toffset:x;\tsize:4;\n").is_err());
        assert!(parse_format("\tfield:;\toffset:8;\tsize:4;\n").is_err());
    }

    #[test]
    fn missing_tracepoint_is_named() {
        let dir = std::env::temp_dir().join(format!("sandwatch-tracefs-{}", std::process::id()));
        let t = Tracefs::at(&dir);
        let err = t.fields(EXIT).unwrap_err().to_string();
        assert!(err.starts_with("tracepoint sched/sched_process_exit is missing on this kernel"), "{err}");
    }
}
