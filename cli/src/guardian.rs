//! The command `run` starts must never outlive the hold. `flock(1)` gets
//! that for free: its lock lives in a descriptor every descendant inherits.
//! Ours lives in `run`'s watchdog, so when `run` dies (SIGKILL from the OOM
//! killer, a crash) nobody renews the lock, it expires, and a second `run`
//! takes it while the first command still runs.
//!
//! Two guards, so that nothing is left between them:
//! * the command itself gets SIGKILL when `run` dies (Linux's parent-death
//!   signal, set before it execs);
//! * a guardian process, forked from `run`, waits on a pipe only `run`
//!   holds the write end of. When `run` is gone the pipe reads end-of-file
//!   and the guardian kills the command's whole process group (what a
//!   `sh -c` started too), then exits. A `run` that ends normally disarms
//!   it first.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A forked process that kills the command's group if `run` dies.
pub struct Guardian {
    write: OwnedFd,
    pid: libc::pid_t,
}

impl Guardian {
    /// Forks a guardian that sends SIGKILL to `target` (a pid, or minus a
    /// process group id) once this process is gone without [`disarm`].
    ///
    /// [`disarm`]: Guardian::disarm
    pub fn watch(target: libc::pid_t) -> io::Result<Guardian> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both are fresh descriptors owned here alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child of a multi-threaded process runs only
        // async-signal-safe calls (close, signal, read, kill, _exit) and
        // touches no memory the other threads may hold locked.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe { guard(read.as_raw_fd(), write.as_raw_fd(), target) },
            pid => Ok(Guardian { write, pid }),
        }
    }

    /// The command has ended: the guardian exits without a signal, and is
    /// reaped.
    pub fn disarm(self) {
        let byte = [1u8];
        // SAFETY: a write of one byte from a live buffer to our own pipe,
        // then a wait for our own child.
        unsafe {
            libc::write(self.write.as_raw_fd(), byte.as_ptr().cast(), 1);
            drop(self.write);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The guardian's whole life, in the forked child.
///
/// # Safety
/// Only in the child of `fork`, which it never returns to.
unsafe fn guard(read: libc::c_int, write: libc::c_int, target: libc::pid_t) -> ! {
    libc::close(write);
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
