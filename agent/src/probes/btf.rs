//! Just enough of the BPF Type Format to find member offsets of kernel
//! structs (`task_struct`) in `/sys/kernel/btf/vmlinux`, so the programs can
//! read them on any kernel without compiled-in layouts.

use std::path::Path;

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
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
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

/// A BTF blob with an index of where each type starts. Members are read
/// from the blob on demand, so parsing the ~5 MiB vmlinux BTF costs one
/// `u32` per type on top of the blob itself.
pub struct Btf {
    /// The whole blob; `types` and `strings` are ranges of it.
    data: Vec<u8>,
    types: std::ops::Range<usize>,
    strings: std::ops::Range<usize>,
    /// Byte offset in `types` of type id `i + 1` (id 0 is `void`).
    index: Vec<u32>,
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, BtfError> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(BtfError::Malformed("truncated"))
}

/// The fixed part of a type record.
struct TypeHead {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// size, or the referenced type id for typedef/const/volatile/...
    size_or_type: u32,
    /// Where the kind-specific data starts.
    data: usize,
}

impl Btf {
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data =
            std::fs::read(path).map_err(|_| BtfError::Missing(path.display().to_string()))?;
        Self::parse(data)
    }

    pub fn parse(data: Vec<u8>) -> Result<Self, BtfError> {
        let magic = data
            .get(0..2)
            .map(|m| u16::from_le_bytes([m[0], m[1]]))
            .ok_or(BtfError::Malformed("truncated header"))?;
        if magic != MAGIC {
            return Err(BtfError::Malformed("bad magic (big-endian BTF is not supported)"));
        }
        let hdr_len = u32_at(&data, 4)? as usize;
        let type_off = u32_at(&data, 8)? as usize;
        let type_len = u32_at(&data, 12)? as usize;
        let str_off = u32_at(&data, 16)? as usize;
        let str_len = u32_at(&data, 20)? as usize;
        let section = |off: usize, len: usize, what| {
            hdr_len
                .checked_add(off)
                .and_then(|start| Some(start..start.checked_add(len)?))
                .filter(|r| r.end <= data.len())
                .ok_or(BtfError::Malformed(what))
        };
        let types = section(type_off, type_len, "type section out of bounds")?;
        let strings = section(str_off, str_len, "string section out of bounds")?;

        let mut btf = Self {
            data,
            types,
            strings,
            index: Vec::new(),
        };
        let mut at = 0;
        while at < btf.types.len() {
            let offset = u32::try_from(at).map_err(|_| BtfError::Malformed("type section too large"))?;
            let head = btf.head_at(at)?;
            let extra = match head.kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => head.vlen * 12,
                KIND_ENUM | KIND_FUNC_PROTO => head.vlen * 8,
                0..=19 => 0,
                _ => return Err(BtfError::Malformed("unknown type kind")),
            };
            btf.index.push(offset);
            at = head.data + extra;
        }
        Ok(btf)
    }

    fn type_bytes(&self) -> &[u8] {
        self.data.get(self.types.clone()).unwrap_or_default()
    }

    fn head_at(&self, at: usize) -> Result<TypeHead, BtfError> {
        let types = self.type_bytes();
        let info = u32_at(types, at + 4)?;
        Ok(TypeHead {
            name_off: u32_at(types, at)?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_or_type: u32_at(types, at + 8)?,
            data: at + 12,
        })
    }

    fn head(&self, id: u32) -> Option<TypeHead> {
        let at = *self.index.get((id as usize).checked_sub(1)?)?;
        self.head_at(at as usize).ok()
    }

    /// (name_off, type id, bit offset) of member `i` of a struct/union.
    fn member(&self, head: &TypeHead, i: usize) -> Option<(u32, u32, u32)> {
        let (types, m) = (self.type_bytes(), head.data + i * 12);
        let offset = u32_at(types, m + 8).ok()?;
        Some((
            u32_at(types, m).ok()?,
            u32_at(types, m + 4).ok()?,
            // With kind_flag the top 8 bits hold a bitfield size.
            if head.kind_flag { offset & 0x00ff_ffff } else { offset },
        ))
    }

    fn name(&self, off: u32) -> &[u8] {
        let strings = self.data.get(self.strings.clone()).unwrap_or_default();
        let rest = strings.get(off as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    /// Byte offset of `member` inside `struct name`, looking through
    /// anonymous structs and unions.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let id = (1..=self.index.len() as u32)
            .find(|&id| {
                self.head(id).is_some_and(|h| {
                    h.kind == KIND_STRUCT && h.vlen > 0 && self.name(h.name_off) == name.as_bytes()
                })
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))?;
        self.find_member(id, member.as_bytes(), 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoMember(name.to_string(), member.to_string()))
    }

    fn find_member(&self, id: u32, member: &[u8], depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        let head = self.head(id)?;
        if !matches!(head.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        let members: Vec<_> = (0..head.vlen).filter_map(|i| self.member(&head, i)).collect();
        if let Some(&(_, _, bits)) = members.iter().find(|(n, _, _)| self.name(*n) == member) {
            return Some(bits);
        }
        members
            .iter()
            .filter(|(n, _, _)| *n == 0)
            .find_map(|&(_, ty, bits)| {
                let inner = self.skip_modifiers(ty)?;
                bits.checked_add(self.find_member(inner, member, depth + 1)?)
            })
    }

    fn skip_modifiers(&self, mut id: u32) -> Option<u32> {
        for _ in 0..16 {
            let h = self.head(id)?;
            match h.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = h.size_or_type
                }
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
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(1);
        out.push(0);
        for v in [24u32, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(&strings);
        out
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
    }
}
