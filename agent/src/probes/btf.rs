//! Just enough of the BPF Type Format to find member offsets of kernel
//! structs (`task_struct`) in `/sys/kernel/btf/vmlinux`, so the programs can
//! read them on any kernel without compiled-in layouts.

use std::{io::Read as _, path::Path};

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("kernel BTF not found at {0}: sandwatch needs CONFIG_DEBUG_INFO_BTF")]
    Missing(String),
    #[error("kernel BTF is malformed: {0}")]
    Malformed(&'static str),
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    #[error("kernel BTF: struct {0} has no member {1}")]
    NoMember(String, String),
}

const MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Where the BTF bytes are: in memory (tests, fuzzing) or in the kernel's
/// file, read as needed. The ~5 MiB vmlinux BTF is never held whole: two
/// buffered passes (types, then strings) and a few small reads find what
/// is wanted, so start-up peaks a few hundred KiB above the agent's need.
enum Blob {
    Memory(Vec<u8>),
    File(std::fs::File),
}

/// Reads a file at a moving offset without seeking a shared handle.
struct FileAt<'a> {
    file: &'a std::fs::File,
    pos: u64,
    end: u64,
}

impl std::io::Read for FileAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt as _;
        let room = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let n = buf.len().min(room);
        if n == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += read as u64;
        Ok(read)
    }
}

impl Blob {
    fn read_at(&self, at: usize, len: usize) -> Option<std::borrow::Cow<'_, [u8]>> {
        match self {
            Blob::Memory(d) => d.get(at..at.checked_add(len)?).map(std::borrow::Cow::Borrowed),
            Blob::File(f) => {
                use std::os::unix::fs::FileExt as _;
                let mut buf = vec![0; len];
                f.read_exact_at(&mut buf, at as u64).ok()?;
                Some(std::borrow::Cow::Owned(buf))
            }
        }
    }

    /// A buffered reader over `range`, for one pass.
    fn reader(&self, range: std::ops::Range<usize>) -> Box<dyn std::io::BufRead + '_> {
        match self {
            Blob::Memory(d) => Box::new(d.get(range).unwrap_or_default()),
            Blob::File(f) => Box::new(std::io::BufReader::with_capacity(
                64 * 1024,
                FileAt { file: f, pos: range.start as u64, end: range.end as u64 },
            )),
        }
    }

    fn len(&self) -> Option<usize> {
        match self {
            Blob::Memory(d) => Some(d.len()),
            Blob::File(f) => f.metadata().ok().and_then(|m| usize::try_from(m.len()).ok()),
        }
    }
}

/// A BTF blob with an index of where each type starts and which types
/// are structs; members and names are read on demand.
pub struct Btf {
    blob: Blob,
    types: std::ops::Range<usize>,
    strings: std::ops::Range<usize>,
    /// Byte offset in `types` of type id `i + 1` (id 0 is `void`).
    index: Vec<u32>,
    /// (type id, name offset) of every struct with members.
    structs: Vec<(u32, u32)>,
    /// (type id, name offset) of every typedef (raw tracepoints' prototypes
    /// are typedefs named `btf_trace_<tracepoint>`).
    typedefs: Vec<(u32, u32)>,
    /// (type id, name offset) of every named enum with values.
    enums: Vec<(u32, u32)>,
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, BtfError> {
    b.get(at..at + 4).and_then(|s| s.try_into().ok()).map(u32::from_le_bytes).ok_or(BtfError::Malformed("truncated"))
}

/// The fixed part of a type record.
struct TypeHead {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// size, or the referenced type id for typedef/const/volatile/...
    size_or_type: u32,
    /// Where the kind-specific data starts (offset in the type section).
    data: usize,
}

fn parse_head(b: &[u8], at: usize) -> Result<TypeHead, BtfError> {
    let info = u32_at(b, 4)?;
    Ok(TypeHead {
        name_off: u32_at(b, 0)?,
        kind: (info >> 24) & 0x1f,
        vlen: (info & 0xffff) as usize,
        kind_flag: info >> 31 == 1,
        size_or_type: u32_at(b, 8)?,
        data: at + 12,
    })
}

impl Btf {
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let file = std::fs::File::open(path).map_err(|_| BtfError::Missing(path.display().to_string()))?;
        Self::index(Blob::File(file))
    }

    pub fn parse(data: Vec<u8>) -> Result<Self, BtfError> {
        Self::index(Blob::Memory(data))
    }

    /// Reads the header and makes one pass over the types.
    fn index(blob: Blob) -> Result<Self, BtfError> {
        let header = blob.read_at(0, 24).ok_or(BtfError::Malformed("truncated header"))?;
        let magic = u16::from_le_bytes([header[0], header[1]]);
        if magic != MAGIC {
            return Err(BtfError::Malformed("bad magic (big-endian BTF is not supported)"));
        }
        let hdr_len = u32_at(&header, 4)? as usize;
        let type_off = u32_at(&header, 8)? as usize;
        let type_len = u32_at(&header, 12)? as usize;
        let str_off = u32_at(&header, 16)? as usize;
        let str_len = u32_at(&header, 20)? as usize;
        let size = blob.len().ok_or(BtfError::Malformed("unreadable"))?;
        let section = |off: usize, len: usize, what| {
            hdr_len
                .checked_add(off)
                .and_then(|start| Some(start..start.checked_add(len)?))
                .filter(|r| r.end <= size)
                .ok_or(BtfError::Malformed(what))
        };
        let types = section(type_off, type_len, "type section out of bounds")?;
        let strings = section(str_off, str_len, "string section out of bounds")?;

        let mut index = Vec::new();
        let mut structs = Vec::new();
        let mut typedefs = Vec::new();
        let mut enums = Vec::new();
        {
            let mut reader = blob.reader(types.clone());
            let mut at = 0;
            let mut head = [0u8; 12];
            while at < types.len() {
                let offset = u32::try_from(at).map_err(|_| BtfError::Malformed("type section too large"))?;
                reader.read_exact(&mut head).map_err(|_| BtfError::Malformed("truncated"))?;
                let h = parse_head(&head, at)?;
                let extra = match h.kind {
                    KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                    KIND_ARRAY => 12,
                    KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => h.vlen * 12,
                    KIND_ENUM | KIND_FUNC_PROTO => h.vlen * 8,
                    0..=19 => 0,
                    _ => return Err(BtfError::Malformed("unknown type kind")),
                };
                index.push(offset);
                if h.kind == KIND_STRUCT && h.vlen > 0 {
                    structs.push((index.len() as u32, h.name_off));
                }
                if h.kind == KIND_TYPEDEF {
                    typedefs.push((index.len() as u32, h.name_off));
                }
                if matches!(h.kind, KIND_ENUM | KIND_ENUM64) && h.vlen > 0 && h.name_off != 0 {
                    enums.push((index.len() as u32, h.name_off));
                }
                let skipped = std::io::copy(&mut (&mut reader).take(extra as u64), &mut std::io::sink())
                    .map_err(|_| BtfError::Malformed("truncated"))?;
                if skipped != extra as u64 {
                    return Err(BtfError::Malformed("truncated"));
                }
                at = h.data + extra;
            }
        }
        Ok(Self { blob, types, strings, index, structs, typedefs, enums })
    }

    fn head(&self, id: u32) -> Option<TypeHead> {
        let at = *self.index.get((id as usize).checked_sub(1)?)? as usize;
        let bytes = self.blob.read_at(self.types.start.checked_add(at)?, 12)?;
        parse_head(&bytes, at).ok()
    }

    /// (name_off, type id, bit offset) of every member of a struct/union.
    fn members(&self, head: &TypeHead) -> Vec<(u32, u32, u32)> {
        let len = head.vlen * 12;
        let Some(bytes) = self.types.start.checked_add(head.data).and_then(|at| self.blob.read_at(at, len)) else {
            return Vec::new();
        };
        (0..head.vlen)
            .filter_map(|i| {
                let m = i * 12;
                let offset = u32_at(&bytes, m + 8).ok()?;
                Some((
                    u32_at(&bytes, m).ok()?,
                    u32_at(&bytes, m + 4).ok()?,
                    // With kind_flag the top 8 bits hold a bitfield size.
                    if head.kind_flag { offset & 0x00ff_ffff } else { offset },
                ))
            })
            .collect()
    }

    /// Where each of `names` starts in the string section (one pass).
    fn string_offsets(&self, names: &[&str]) -> Vec<Option<u32>> {
        use std::io::BufRead as _;
        let mut found = vec![None; names.len()];
        let mut reader = self.blob.reader(self.strings.clone());
        let mut at = 0u32;
        let mut s = Vec::new();
        while found.iter().any(Option::is_none) {
            s.clear();
            match reader.read_until(0, &mut s) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let name = s.strip_suffix(&[0]).unwrap_or(&s);
                    for (slot, want) in found.iter_mut().zip(names) {
                        if slot.is_none() && name == want.as_bytes() {
                            *slot = Some(at);
                        }
                    }
                    at = at.saturating_add(n as u32);
                }
            }
        }
        found
    }

    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        self.member_offsets(&[(name, member)]).map(|v| v[0])
    }

    /// Byte offsets of several (struct, member) pairs, with one pass over
    /// the strings for all of them.
    pub fn member_offsets(&self, pairs: &[(&str, &str)]) -> Result<Vec<u32>, BtfError> {
        let names: Vec<&str> = pairs.iter().flat_map(|(s, m)| [*s, *m]).collect();
        let offsets = self.string_offsets(&names);
        pairs
            .iter()
            .enumerate()
            .map(|(i, (name, member))| {
                let no_struct = || BtfError::NoStruct(name.to_string());
                let name_off = offsets[2 * i].ok_or_else(no_struct)?;
                let id = self.structs.iter().find(|(_, n)| *n == name_off).map(|(id, _)| *id).ok_or_else(no_struct)?;
                let no_member = || BtfError::NoMember(name.to_string(), member.to_string());
                let member_off = offsets[2 * i + 1].ok_or_else(no_member)?;
                self.find_member(id, member_off, 0).map(|bits| bits / 8).ok_or_else(no_member)
            })
            .collect()
    }

    /// The value of `value` in enum `name` (e.g. `memory_cgrp_id` in
    /// `cgroup_subsys_id`, which depends on the kernel's configuration).
    pub fn enumerator(&self, name: &str, value: &str) -> Option<i64> {
        let offsets = self.string_offsets(&[name, value]);
        let (name_off, value_off) = (offsets[0]?, offsets[1]?);
        self.enums.iter().filter(|(_, n)| *n == name_off).find_map(|&(id, _)| {
            let head = self.head(id)?;
            let size = if head.kind == KIND_ENUM64 { 12 } else { 8 };
            let at = self.types.start.checked_add(head.data)?;
            let bytes = self.blob.read_at(at, head.vlen * size)?;
            (0..head.vlen).find_map(|i| {
                let m = i * size;
                if u32_at(&bytes, m).ok()? != value_off {
                    return None;
                }
                let lo = u32_at(&bytes, m + 4).ok()?;
                Some(if size == 12 {
                    (i64::from(u32_at(&bytes, m + 8).ok()?) << 32) | i64::from(lo)
                } else {
                    i64::from(lo as i32)
                })
            })
        })
    }

    /// Whether raw tracepoint `tracepoint` passes a pointer to struct
    /// `name` as its argument `arg` (from 0, after the context): what its
    /// programs see, read off the kernel's `btf_trace_<tracepoint>`
    /// prototype. False where the tracepoint or the struct is unknown.
    pub fn tracepoint_passes(&self, tracepoint: &str, arg: usize, name: &str) -> bool {
        let typedef = format!("btf_trace_{tracepoint}");
        let offsets = self.string_offsets(&[&typedef, name]);
        let (Some(typedef_off), Some(name_off)) = (offsets[0], offsets[1]) else {
            return false;
        };
        self.typedefs
            .iter()
            .filter(|(_, n)| *n == typedef_off)
            .any(|&(id, _)| self.prototype_param(id, arg + 1).is_some_and(|ty| self.points_to(ty, name_off)))
    }

    /// Whether raw tracepoint `tracepoint` passes an integer (`int`,
    /// `pid_t`, …) as its argument `arg` (from 0, after the context).
    pub fn tracepoint_passes_int(&self, tracepoint: &str, arg: usize) -> bool {
        let typedef = format!("btf_trace_{tracepoint}");
        let Some(typedef_off) = self.string_offsets(&[&typedef])[0] else {
            return false;
        };
        self.typedefs.iter().filter(|(_, n)| *n == typedef_off).any(|&(id, _)| {
            self.prototype_param(id, arg + 1)
                .and_then(|ty| self.skip_modifiers(ty))
                .and_then(|ty| self.head(ty))
                .is_some_and(|h| h.kind == KIND_INT)
        })
    }

    /// The size in bytes of struct `name`.
    pub fn struct_size(&self, name: &str) -> Option<u32> {
        let name_off = self.string_offsets(&[name])[0]?;
        let id = self.structs.iter().find(|(_, n)| *n == name_off)?.0;
        Some(self.head(id)?.size_or_type)
    }

    /// The type of parameter `i` of the function prototype that typedef
    /// `id` points to.
    fn prototype_param(&self, id: u32, i: usize) -> Option<u32> {
        let pointer = self.head(id)?.size_or_type;
        let pointer = self.skip_modifiers(pointer)?;
        let head = self.head(pointer)?;
        if head.kind != KIND_PTR {
            return None;
        }
        let proto = self.skip_modifiers(head.size_or_type)?;
        let head = self.head(proto)?;
        if head.kind != KIND_FUNC_PROTO || i >= head.vlen {
            return None;
        }
        let at = self.types.start.checked_add(head.data)?.checked_add(i * 8)?;
        let param = self.blob.read_at(at, 8)?;
        u32_at(&param, 4).ok()
    }

    /// Whether type `id` is a pointer to the struct named at `name_off`.
    fn points_to(&self, id: u32, name_off: u32) -> bool {
        let Some(head) = self.skip_modifiers(id).and_then(|p| self.head(p)) else {
            return false;
        };
        head.kind == KIND_PTR
            && self
                .skip_modifiers(head.size_or_type)
                .and_then(|t| self.head(t))
                .is_some_and(|t| matches!(t.kind, KIND_STRUCT | KIND_FWD) && t.name_off == name_off)
    }

    fn find_member(&self, id: u32, member_off: u32, depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        let head = self.head(id)?;
        if !matches!(head.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        let members = self.members(&head);
        if let Some(&(_, _, bits)) = members.iter().find(|(n, _, _)| *n == member_off) {
            return Some(bits);
        }
        members.iter().filter(|(n, _, _)| *n == 0).find_map(|&(_, ty, bits)| {
            let inner = self.skip_modifiers(ty)?;
            bits.checked_add(self.find_member(inner, member_off, depth + 1)?)
        })
    }

    fn skip_modifiers(&self, mut id: u32) -> Option<u32> {
        for _ in 0..16 {
            let h = self.head(id)?;
            match h.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = h.size_or_type,
                _ => return Some(id),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob: struct outer { int a; union { int x; int wanted; }; }
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0outer\0a\0wanted\0x\0".to_vec();
        let s = |name: &str| -> u32 {
            let pos = strings
                .windows(name.len() + 1)
                .position(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0)
                .unwrap();
            pos as u32
        };
        let mut types = Vec::new();
        let mut push = |v: u32| types.extend_from_slice(&v.to_le_bytes());
        // 1: int
        push(s("int"));
        push(KIND_INT << 24);
        push(4);
        push(32);
        // 2: anonymous union { int x @0; int wanted @0 }
        push(0);
        push((KIND_UNION << 24) | 2);
        push(4);
        for (n, off) in [("x", 0), ("wanted", 0)] {
            push(s(n));
            push(1);
            push(off);
        }
        // 3: struct outer { int a @0; union @64 bits }
        push(s("outer"));
        push((KIND_STRUCT << 24) | 2);
        push(12);
        push(s("a"));
        push(1);
        push(0);
        push(0);
        push(2);
        push(64);
        wrap(&types, &strings)
    }

    fn wrap(types: &[u8], strings: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(1);
        out.push(0);
        for v in [24u32, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(types);
        out.extend_from_slice(strings);
        out
    }

    /// Two raw tracepoints' prototypes: `mark_victim(void *, struct
    /// task_struct *, int)` and `old(void *, int)`.
    fn prototypes() -> Vec<u8> {
        let strings = b"\0int\0task_struct\0btf_trace_mark_victim\0btf_trace_old\0pid\0".to_vec();
        let s = |name: &str| strings.windows(name.len()).position(|w| w == name.as_bytes()).unwrap() as u32;
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|v| types.extend_from_slice(&v.to_le_bytes()));
        push(&[s("int"), KIND_INT << 24, 4, 32]); // 1
        push(&[s("task_struct"), (KIND_STRUCT << 24) | 1, 4, s("pid"), 1, 0]); // 2
        push(&[0, KIND_PTR << 24, 2]); // 3: struct task_struct *
        push(&[0, KIND_PTR << 24, 0]); // 4: void *
        push(&[0, (KIND_FUNC_PROTO << 24) | 3, 0, 0, 4, 0, 3, 0, 1]); // 5
        push(&[0, KIND_PTR << 24, 5]); // 6
        push(&[s("btf_trace_mark_victim"), KIND_TYPEDEF << 24, 6]); // 7
        push(&[0, (KIND_FUNC_PROTO << 24) | 2, 0, 0, 4, 0, 1]); // 8
        push(&[0, KIND_PTR << 24, 8]); // 9
        push(&[s("btf_trace_old"), KIND_TYPEDEF << 24, 9]); // 10
        wrap(&types, &strings)
    }

    #[test]
    fn tells_which_raw_tracepoints_pass_a_task() {
        let btf = Btf::parse(prototypes()).unwrap();
        assert!(btf.tracepoint_passes("mark_victim", 0, "task_struct"));
        assert!(!btf.tracepoint_passes("mark_victim", 1, "task_struct"), "an int is no task");
        assert!(!btf.tracepoint_passes("mark_victim", 2, "task_struct"), "past the last argument");
        assert!(!btf.tracepoint_passes("old", 0, "task_struct"));
        assert!(!btf.tracepoint_passes("absent", 0, "task_struct"));
        assert!(!btf.tracepoint_passes("mark_victim", 0, "cgroup"));
        let b = prototypes();
        for cut in 0..b.len() {
            if let Ok(btf) = Btf::parse(b[..cut].to_vec()) {
                let _ = btf.tracepoint_passes("mark_victim", 0, "task_struct");
            }
        }
    }

    #[test]
    fn finds_direct_and_anonymous_members() {
        let btf = Btf::parse(blob()).unwrap();
        assert_eq!(btf.member_offset("outer", "a").unwrap(), 0);
        assert_eq!(btf.member_offset("outer", "wanted").unwrap(), 8);
        assert!(matches!(btf.member_offset("outer", "nope"), Err(BtfError::NoMember(..))));
        assert!(matches!(btf.member_offset("inner", "a"), Err(BtfError::NoStruct(..))));
    }

    /// Found by the btf fuzz target in CI: an anonymous member at a huge
    /// bit offset made the nested offset overflow.
    #[test]
    fn nested_offsets_that_overflow_are_not_found() {
        let mut b = blob();
        // The anonymous union's bit offset is the last u32 of the type
        // section; "wanted"'s offset inside it is at bytes 72..76.
        let types_end = 24 + u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        b[types_end - 4..types_end].copy_from_slice(&u32::MAX.to_le_bytes());
        b[72..76].copy_from_slice(&8u32.to_le_bytes());
        let btf = Btf::parse(b).unwrap();
        assert!(matches!(btf.member_offset("outer", "wanted"), Err(BtfError::NoMember(..))));
        assert_eq!(btf.member_offset("outer", "a").unwrap(), 0, "the rest still resolves");
    }

    #[test]
    fn truncated_or_foreign_blobs_are_errors_not_panics() {
        let b = blob();
        for cut in 0..b.len() {
            let _ = Btf::parse(b[..cut].to_vec());
        }
        assert!(Btf::parse(b"\x9f\xeb".to_vec()).is_err());
        assert!(Btf::parse(vec![0u8; 32]).is_err());
    }

    #[test]
    fn real_kernel_task_struct() {
        // sandwatch requires kernel BTF; this machine kind has it.
        let btf = Btf::from_sys_fs().expect("kernel BTF at /sys/kernel/btf/vmlinux");
        let pid = btf.member_offset("task_struct", "pid").unwrap();
        let tgid = btf.member_offset("task_struct", "tgid").unwrap();
        assert_eq!(tgid, pid + 4, "pid and tgid are adjacent in task_struct");
        // TP_PROTO(struct task_struct *parent, struct task_struct *child)
        assert!(btf.tracepoint_passes("sched_process_fork", 1, "task_struct"));
        assert!(!btf.tracepoint_passes("sched_process_exit", 3, "task_struct"));
    }

    /// Guards: the signal program attached where `signal_generate` passes
    /// something else than it reads (its prototype is the kernel's word).
    #[test]
    fn real_kernel_signal_generate() {
        let btf = Btf::from_sys_fs().expect("kernel BTF at /sys/kernel/btf/vmlinux");
        // TP_PROTO(int sig, struct kernel_siginfo *info, struct task_struct
        // *task, int group, int result)
        assert!(btf.tracepoint_passes_int("signal_generate", 0));
        assert!(btf.tracepoint_passes("signal_generate", 1, "kernel_siginfo"));
        assert!(btf.tracepoint_passes("signal_generate", 2, "task_struct"));
        assert!(btf.tracepoint_passes_int("signal_generate", 3));
        assert!(btf.tracepoint_passes_int("signal_generate", 4));
        assert!(!btf.tracepoint_passes_int("signal_generate", 1), "a pointer is no int");
        assert!(!btf.tracepoint_passes_int("signal_generate", 5), "it has five arguments");
        assert!(!btf.tracepoint_passes_int("no_such_tracepoint", 0));
        assert_eq!(btf.struct_size("kernel_siginfo"), Some(48));
        assert_eq!(btf.struct_size("no_such_struct"), None);
    }

    #[test]
    fn an_enumerators_value_is_read_from_its_enum_alone() {
        let strings = b"\0cgroup_subsys_id\0cpuset_cgrp_id\0memory_cgrp_id\0other\0".to_vec();
        let s = |name: &str| strings.windows(name.len()).position(|w| w == name.as_bytes()).unwrap() as u32;
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|v| types.extend_from_slice(&v.to_le_bytes()));
        // 1: enum other { memory_cgrp_id = 9 }: same value name, other enum.
        push(&[s("other"), (KIND_ENUM << 24) | 1, 4, s("memory_cgrp_id"), 9]);
        // 2: enum cgroup_subsys_id { cpuset_cgrp_id, memory_cgrp_id = 4 }
        push(&[s("cgroup_subsys_id"), (KIND_ENUM << 24) | 2, 4, s("cpuset_cgrp_id"), 0, s("memory_cgrp_id"), 4]);
        let btf = Btf::parse(wrap(&types, &strings)).unwrap();
        assert_eq!(btf.enumerator("cgroup_subsys_id", "memory_cgrp_id"), Some(4));
        assert_eq!(btf.enumerator("cgroup_subsys_id", "cpuset_cgrp_id"), Some(0));
        assert_eq!(btf.enumerator("cgroup_subsys_id", "nothing"), None);
        assert_eq!(btf.enumerator("nothing", "memory_cgrp_id"), None);
    }
}
