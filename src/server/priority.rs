//! Heavy calls run at a lower CPU priority than the async workers.
//!
//! Admission control keeps heavy calls off the async workers, but on a machine with few cores
//! the blocking threads (and the layout search's scoped threads) still compete with them for
//! CPU time, and the scheduler shares it equally: a cheap read then waits for a time slice
//! behind a layout search. Lowering the heavy threads' priority (Linux nice value) lets the
//! scheduler run a woken async worker first, so cheap calls stay fast while heavy ones use
//! every core that is otherwise idle. Threads a heavy job spawns inherit the value.

/// Nice value of the threads that run heavy calls (0 is normal, 19 the lowest priority).
/// At 10 the kernel gives a normal thread about ten times the CPU share of a heavy one.
pub const HEAVY_THREAD_NICE: i32 = 10;

thread_local! {
    static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Lowers the calling thread's CPU priority to [`HEAVY_THREAD_NICE`], once per thread. The
/// blocking pool runs only heavy calls, so its threads are never raised again (an
/// unprivileged process could not). Where this is not supported it does nothing: priority
/// is an optimisation, not a correctness requirement.
pub fn lower_this_thread() {
    LOWERED.with(|lowered| {
        if !lowered.get() {
            lowered.set(true);
            set_this_thread_nice(HEAVY_THREAD_NICE);
        }
    });
}

#[cfg(target_os = "linux")]
fn set_this_thread_nice(nice: i32) {
    // SAFETY: setpriority takes plain integers and touches no memory of ours. On Linux the
    // nice value is per thread, and `who = 0` with PRIO_PROCESS names the calling thread.
    let status = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if status != 0 {
        tracing::debug!(
            "could not lower a heavy-call thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn set_this_thread_nice(_nice: i32) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn this_thread_nice() -> i32 {
        // SAFETY: as above; getpriority reads an integer. -1 is also a valid value, but the
        // test only reads values it set itself (0 or above).
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    #[test]
    fn a_heavy_thread_is_lowered_and_its_children_inherit() {
        let (own, child) = std::thread::spawn(|| {
            lower_this_thread();
            let child = std::thread::spawn(this_thread_nice).join().unwrap_or(-100);
            (this_thread_nice(), child)
        })
        .join()
        .unwrap_or((-100, -100));
        assert!(own >= HEAVY_THREAD_NICE, "heavy thread nice {own}");
        assert!(child >= HEAVY_THREAD_NICE, "spawned thread nice {child}");
        // Other threads keep their priority.
        assert!(this_thread_nice() < HEAVY_THREAD_NICE);
    }
}
