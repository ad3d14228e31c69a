//! How the binaries run their main future.
//!
//! smol's executor threads wait on the reactor (epoll) themselves when they have nothing to
//! run, so the task an event wakes runs on the thread that saw the event. A thread blocked in
//! `smol::block_on` on a future that is mostly waiting competes for the reactor too: whenever
//! it holds it, every event it sees wakes a task on another thread (a futex wake and a
//! cross-thread hand-off per event; `strace` of the ingress proxy counted one per request).
//! [`run`] keeps the calling thread out of that: the future runs as a task on the executor,
//! and the thread only sleeps until it is done.

use std::future::Future;

/// Runs `future` to completion on smol's executor threads; the calling thread only waits
/// (it never drives the reactor).
pub fn run<T, F>(future: F) -> T
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    futures_lite::future::block_on(smol::spawn(future))
}

#[cfg(test)]
mod tests {
    /// The future runs on another thread (an executor's), with timers and I/O working, and
    /// its output comes back.
    #[test]
    fn runs_on_the_executor_and_returns_the_output() {
        let caller = std::thread::current().id();
        let (ran_on, waited) = super::run(async {
            let start = std::time::Instant::now();
            smol::Timer::after(std::time::Duration::from_millis(20)).await;
            (std::thread::current().id(), start.elapsed())
        });
        assert_ne!(ran_on, caller);
        assert!(waited >= std::time::Duration::from_millis(20));
    }
}
