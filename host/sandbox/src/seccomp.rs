//! The system calls a confined command is refused, as seccomp-bpf programs built with
//! `seccompiler` (the rust-vmm crate Firecracker uses).
//!
//! The namespaces already keep talaria, the user's files and the network out of reach; the filter
//! closes the kernel interfaces a process could use to get out of them or to attack the kernel:
//! - tracing and reading other processes' memory: `ptrace`, `process_vm_readv`/`writev`,
//!   `pidfd_getfd`;
//! - changing what it sees: `mount` and the new mount API, `umount2`, `pivot_root`, `chroot`,
//!   `unshare`, `setns`, and `clone` with any `CLONE_NEW*` flag (so no new user namespace:
//!   `unshare -r` fails);
//! - the kernel's larger surfaces: `bpf`, `perf_event_open`, `io_uring_*`, `userfaultfd`,
//!   `keyctl`/`add_key`/`request_key`, module loading, `kexec_*`, `open_by_handle_at`, `syslog`,
//!   and the rest of what needs capabilities a command never has;
//! - sockets other than unix, TCP and netlink: no UDP and no raw IPv4/IPv6 sockets (names are
//!   resolved by the egress proxy), no packet, vsock, bluetooth or kernel-crypto sockets;
//! - `ioctl(TIOCSTI)` and `TIOCLINUX`, which would type into a terminal.
//!
//! Refused calls fail with `EPERM`, so programs report an ordinary error. `clone3` fails with
//! `ENOSYS` instead: its flags live in memory a filter cannot read, and `ENOSYS` makes the C
//! library fall back to `clone`, whose flags are checked. On x86-64, x32 system call numbers are
//! refused whole (they would otherwise name the same calls by other numbers).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Why a filter could not be built (an architecture seccompiler does not know).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter for {arch}: {reason}")]
pub struct FilterError {
    arch: &'static str,
    reason: String,
}

/// The programs to install, in order, just before a command is executed.
#[derive(Debug, Clone)]
pub struct Filters {
    pub programs: Vec<BpfProgram>,
}

impl Filters {
    /// Build the filters for this machine's architecture.
    ///
    /// # Errors
    /// The architecture is not one seccompiler supports (x86-64, aarch64, riscv64).
    pub fn new() -> Result<Self, FilterError> {
        let arch = std::env::consts::ARCH;
        let err = |reason: String| FilterError { arch, reason };
        let target = TargetArch::try_from(arch).map_err(|e| err(e.to_string()))?;
        let compile = |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32| -> Result<BpfProgram, FilterError> {
            let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), target)
                .map_err(|e| err(e.to_string()))?;
            filter.try_into().map_err(|e: seccompiler::BackendError| err(e.to_string()))
        };
        let clone3 = compile(BTreeMap::from([(libc::SYS_clone3, Vec::new())]), libc::ENOSYS)?;
        let mut refused = compile(refused_rules().map_err(|e| err(e.to_string()))?, libc::EPERM)?;
        if arch == "x86_64" {
            refuse_x32(&mut refused);
        }
        Ok(Self { programs: vec![clone3, refused] })
    }

    /// Install them on the calling thread (no new privileges must already be set). Allocates
    /// nothing, so it may run between `fork` and `exec`.
    ///
    /// # Errors
    /// The kernel refused a program.
    pub fn apply(&self) -> Result<(), seccompiler::Error> {
        for program in &self.programs {
            seccompiler::apply_filter(program)?;
        }
        Ok(())
    }
}

/// Every call refused with `EPERM`, with the argument conditions under which it is.
fn refused_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let always: &[i64] = &[
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_syslog,
        libc::SYS_quotactl,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_vhangup,
    ];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = always.iter().map(|n| (*n, Vec::new())).collect();

    // clone(flags, ...): any new namespace.
    let namespaces = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ];
    let mut clone = Vec::new();
    for flag in namespaces {
        let bit = u64::from(flag.cast_unsigned());
        clone.push(SeccompRule::new(vec![Cond::new(0, Len::Qword, Op::MaskedEq(bit), bit)?])?);
    }
    rules.insert(libc::SYS_clone, clone);

    // socket(domain, type, ...): only unix, TCP over IPv4/IPv6, and netlink.
    let family = |f: i32| u64::from(f.cast_unsigned());
    let mut socket = Vec::new();
    for domain in [libc::AF_INET, libc::AF_INET6] {
        for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW] {
            socket.push(SeccompRule::new(vec![
                Cond::new(0, Len::Dword, Op::Eq, family(domain))?,
                Cond::new(1, Len::Dword, Op::MaskedEq(0xf), family(kind))?,
            ])?);
        }
    }
    socket.push(SeccompRule::new(vec![
        Cond::new(0, Len::Dword, Op::Ne, family(libc::AF_UNIX))?,
        Cond::new(0, Len::Dword, Op::Ne, family(libc::AF_INET))?,
        Cond::new(0, Len::Dword, Op::Ne, family(libc::AF_INET6))?,
        Cond::new(0, Len::Dword, Op::Ne, family(libc::AF_NETLINK))?,
    ])?);
    rules.insert(libc::SYS_socket, socket);

    // ioctl(fd, TIOCSTI | TIOCLINUX, ...): typing into a terminal.
    let ioctl = [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|request| SeccompRule::new(vec![Cond::new(1, Len::Dword, Op::Eq, request)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);
    Ok(rules)
}

/// Refuse every x32 system call number (bit 30 set) right after the architecture check.
fn refuse_x32(program: &mut BpfProgram) {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let errno = libc::SECCOMP_RET_ERRNO | (libc::EPERM.cast_unsigned() & libc::SECCOMP_RET_DATA);
    // seccompiler's programs open with the three-instruction architecture check (load, compare,
    // kill): the guard goes after it, and later jumps are relative, so nothing else moves.
    let guard = [
        sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: 0 }, // seccomp_data.nr
        sock_filter { code: JGE_K, jt: 0, jf: 1, k: X32_SYSCALL_BIT },
        sock_filter { code: RET_K, jt: 0, jf: 0, k: errno },
    ];
    let at = 3.min(program.len());
    program.splice(at..at, guard);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_build_for_this_machine() {
        let filters = Filters::new().expect("filters");
        assert_eq!(filters.programs.len(), 2);
        // Both open with the architecture check seccompiler writes.
        for program in &filters.programs {
            assert_eq!(program[0].k, 4, "loads seccomp_data.arch");
            assert_eq!(program[2].k, libc::SECCOMP_RET_KILL_PROCESS);
        }
        if std::env::consts::ARCH == "x86_64" {
            let refused = &filters.programs[1];
            assert_eq!((refused[3].k, refused[4].k), (0, 0x4000_0000), "the x32 guard follows");
        }
    }
}
