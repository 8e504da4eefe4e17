//! The thread that stands in for proxy-wasm's tick: every period it asks Envoy to run the
//! configuration's scheduled hook on the main thread, where each worker's `Root` ticks
//! (`filter-native/README.md#the-outbox-and-renewals`). The ABI's schedulers post at once and
//! have no timer, so the module keeps the time itself.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running ticker; dropping it stops the thread and waits for it, so no tick follows.
#[derive(Debug)]
pub struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Calls `tick` every `period` on a thread of its own; `None` when no thread could be
    /// made.
    pub fn start(period: Duration, tick: impl Fn() + Send + 'static) -> Option<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("keyflight-tick".into())
            .spawn(move || {
                let (stopped, wake) = &*stopping;
                let mut stopped = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    let (now, _) = wake
                        .wait_timeout(stopped, period)
                        .unwrap_or_else(PoisonError::into_inner);
                    stopped = now;
                    if *stopped {
                        return;
                    }
                    tick();
                }
            })
            .ok()?;
        Some(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn it_ticks_until_dropped_and_never_after() {
        let (sender, ticks) = mpsc::channel();
        let ticker = Ticker::start(Duration::from_millis(1), move || {
            let _ = sender.send(());
        })
        .expect("a thread");
        assert_eq!(ticks.recv(), Ok(()));
        assert_eq!(ticks.recv(), Ok(()));
        drop(ticker);
        // The thread is joined: its sender is gone, so only ticks already sent remain.
        while ticks.recv().is_ok() {}
        assert!(ticks.try_recv().is_err());
    }
}
