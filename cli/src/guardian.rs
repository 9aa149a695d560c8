//! The command `run` starts must never outlive the hold. `flock(1)` gets
//! that for free: its lock lives in a descriptor every descendant inherits.
//! Ours lives in `run`'s watchdog, so when `run` dies (SIGKILL from the OOM
//! killer, a crash) nobody renews the lock, it expires, and a second `run`
//! takes it while the first command still runs.
//!
//! Two guards, so that nothing is left between them:
//! * the command itself gets SIGKILL when `run` dies (Linux's parent-death
//!   signal, set before it execs);
//! * a guardian process waits on a pipe only `run` holds the write end of.
//!   When `run` is gone the pipe reads end-of-file and the guardian kills
//!   the command's whole process group (what a `sh -c` started too), then
//!   exits. A `run` that ends normally disarms it first.
//!
//! The guardian is made inside the command's own process, after its fork
//! and before its exec (forked twice, so it is nobody's child: a command
//! that waits for any child never waits for it), in the command's process
//! group. So it exists before the command runs a single instruction: a
//! guardian forked by `run` after the spawn left a moment in which a `run`
//! killed at once left what the command had started running (seen in CI).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The pipe a guardian watches; `run` holds its write end.
pub struct Guardian {
    write: OwnedFd,
    read: OwnedFd,
}

impl Guardian {
    /// A guardian for the command `command` will spawn: made in the
    /// command's process before it execs (see the module docs). `own_group`:
    /// the command runs in a process group of its own, which the guardian
    /// kills whole; otherwise only the command.
    pub fn arm(command: &mut tokio::process::Command, own_group: bool) -> io::Result<Guardian> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both are fresh descriptors owned here alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (read_fd, write_fd) = (read.as_raw_fd(), write.as_raw_fd());
        // SAFETY: the closure runs in the command's process between fork
        // and exec, where only async-signal-safe calls are made (getpid,
        // setpgid, getpgrp, fork, waitpid, _exit, and the guardian's own).
        unsafe {
            command.pre_exec(move || fork_guardian(read_fd, write_fd, own_group));
        }
        Ok(Guardian { write, read })
    }

    /// The command has ended (or never started): the guardian exits
    /// without a signal.
    pub fn disarm(self) {
        let byte = [1u8];
        // SAFETY: a write of one byte from a live buffer to our own pipe
        // (EPIPE, not a signal, if the guardian is gone: Rust ignores
        // SIGPIPE).
        unsafe {
            libc::write(self.write.as_raw_fd(), byte.as_ptr().cast(), 1);
        }
        drop(self.read);
    }
}

/// In the command's process, before exec: forks the guardian (twice, so the
/// command is not its parent), waits for the middle process, and goes on
/// to exec.
///
/// # Safety
/// Only between fork and exec.
unsafe fn fork_guardian(read: libc::c_int, write: libc::c_int, own_group: bool) -> io::Result<()> {
    let pid = libc::getpid();
    if own_group {
        // As `process_group(0)` does; whatever order the spawn applies them.
        libc::setpgid(0, 0);
    }
    let target = if own_group { -libc::getpgrp() } else { pid };
    match libc::fork() {
        -1 => Err(io::Error::last_os_error()),
        0 => match libc::fork() {
            0 => guard(read, write, target),
            -1 => libc::_exit(1),
            _ => libc::_exit(0),
        },
        middle => {
            let mut status = 0;
            libc::waitpid(middle, &mut status, 0);
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Ok(())
            } else {
                Err(io::Error::other("cannot fork the guardian"))
            }
        }
    }
}

/// The guardian's whole life, in the forked child.
///
/// # Safety
/// Only in the child of `fork`, which it never returns to.
unsafe fn guard(read: libc::c_int, write: libc::c_int, target: libc::pid_t) -> ! {
    // Nothing of the command's but the pipe: a reader of its output must
    // not wait for the guardian to let go of it.
    for fd in 0..1024 {
        if fd != read {
            libc::close(fd);
        }
    }
    let _ = write;
    // What reaches `run`'s process group (a terminal's Ctrl-C, Ctrl-Z, a
    // hang-up) is `run`'s to handle; the guardian outlives all of it.
    for signal in [
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGTERM,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
    ] {
        libc::signal(signal, libc::SIG_IGN);
    }
    let mut byte = 0u8;
    loop {
        match libc::read(read, (&mut byte as *mut u8).cast(), 1) {
            // Disarmed: the command ended while `run` still held.
            1 => libc::_exit(0),
            n if n < 0 && *libc::__errno_location() == libc::EINTR => continue,
            // End of file (or a broken pipe): `run` is gone.
            _ => {
                libc::kill(target, libc::SIGKILL);
                libc::_exit(0)
            }
        }
    }
}

/// Makes the command spawned by `command` get SIGKILL when `run` dies. The
/// signal follows the thread that forks the command: `run`'s main thread
/// (the runtime's `block_on`), which lives as long as `run`.
pub fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe and touch no
    // memory.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // `run` died before the signal was set: it never will be sent.
            if libc::getppid() != parent {
                libc::_exit(128 + libc::SIGKILL);
            }
            Ok(())
        });
    }
}
