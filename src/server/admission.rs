//! Admission control and the panic guard: the one place MCP tool calls are dispatched from.
//!
//! Heavy calls (every cost-model tool, and the skill tools that fuzzy-match names or search)
//! run on tokio's blocking pool, at most one per core at a time, so the async workers stay
//! free for cheap calls (listings, resources, prompts). Calls beyond the cores wait in a
//! bounded queue; beyond that bound a call is answered at once with a "busy, retry later"
//! error result instead of piling up. Heavy threads run at a lower CPU priority
//! ([`super::priority`]), so a cheap call is scheduled first when both want a core. Every call, heavy or cheap, runs under
//! [`crate::tools::guard::catch`], so a bug answers with an error naming the tool.

use std::fmt::Display;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::Json;
use tokio::sync::Semaphore;

use super::SkillServer;
use crate::catalog::Catalog;
use crate::tools::guard;

/// Heavy calls that may wait for a core. A layout search takes up to about a second, so a
/// full queue drains in minutes on a small machine; a client past that is better told to
/// retry than left waiting.
pub const QUEUE_BOUND: usize = 1024;

/// The heavy-call limiter shared by every session of one server.
#[derive(Debug)]
pub struct Admission {
    running: Arc<Semaphore>,
    /// Calls admitted and not finished (running or waiting for a core).
    admitted: Arc<AtomicUsize>,
    workers: usize,
    capacity: usize,
}

impl Admission {
    /// `workers` heavy calls at a time, `queue` more waiting.
    pub fn new(workers: usize, queue: usize) -> Admission {
        let workers = workers.max(1);
        Admission {
            running: Arc::new(Semaphore::new(workers)),
            admitted: Arc::new(AtomicUsize::new(0)),
            workers,
            capacity: workers.saturating_add(queue),
        }
    }

    /// One heavy call per available core, [`QUEUE_BOUND`] waiting.
    pub fn for_this_machine() -> Admission {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Admission::new(cores, QUEUE_BOUND)
    }

    /// Runs `job` on the blocking pool once a core is free; answers "busy" at once when the
    /// queue is full, and an error naming the tool when the job panics.
    pub async fn run<T: Send + 'static>(
        &self,
        tool: &'static str,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let ticket = Ticket::take(&self.admitted, self.capacity).ok_or_else(|| {
            format!(
                "the server is busy: {} heavy calls are running or waiting ({} at a time); retry `{tool}` later",
                self.capacity, self.workers
            )
        })?;
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| format!("tool `{tool}`: the server is shutting down"))?;
        // The permit and ticket move into the job: a client that stops waiting frees neither
        // before the work it started is done.
        let handle = tokio::task::spawn_blocking(move || {
            let _held = (permit, ticket);
            super::priority::lower_this_thread();
            guard::catch(tool, job)
        });
        match handle.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(panic.to_string()),
            Err(error) => Err(format!(
                "tool `{tool}` stopped before answering ({error}); retry it"
            )),
        }
    }
}

/// One admitted call; dropping it releases its place.
#[derive(Debug)]
struct Ticket(Arc<AtomicUsize>);

impl Ticket {
    fn take(admitted: &Arc<AtomicUsize>, capacity: usize) -> Option<Ticket> {
        admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < capacity).then_some(n + 1)
            })
            .ok()
            .map(|_| Ticket(admitted.clone()))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SkillServer {
    /// A heavy tool call: admitted, run off the async workers, panic-guarded.
    pub(crate) async fn heavy<T, E>(
        &self,
        tool: &'static str,
        job: impl FnOnce(&Catalog) -> Result<T, E> + Send + 'static,
    ) -> Result<Json<T>, String>
    where
        T: Send + 'static,
        E: Display,
    {
        let catalog = self.catalog();
        self.state
            .admission
            .run(tool, move || job(&catalog).map_err(|e| e.to_string()))
            .await?
            .map(Json)
    }

    /// A cheap tool call (a listing): runs in place, panic-guarded.
    pub(crate) fn cheap<T>(
        &self,
        tool: &'static str,
        job: impl FnOnce(&Catalog) -> T,
    ) -> Result<Json<T>, String> {
        let catalog = self.catalog();
        guard::catch(tool, || job(&catalog))
            .map(Json)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_job_answers_with_the_tool_name() {
        let admission = Admission::new(1, 1);
        let error = admission
            .run("size_cp", || -> u32 { panic!("boom") })
            .await
            .unwrap_err();
        assert!(
            error.contains("`size_cp`") && error.contains("boom"),
            "{error}"
        );
        // The place is released: the next call runs.
        assert_eq!(admission.run("size_cp", || 3).await, Ok(3));
    }

    #[tokio::test]
    async fn beyond_the_queue_a_call_is_told_to_retry() {
        let admission = Arc::new(Admission::new(1, 1));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (started, is_running) = tokio::sync::oneshot::channel::<()>();
        let running = {
            let admission = admission.clone();
            tokio::spawn(async move {
                admission
                    .run("plan_layouts", move || {
                        let _ = started.send(());
                        let _ = wait.recv();
                    })
                    .await
            })
        };
        is_running.await.expect("first call started");
        let queued = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.run("plan_layouts", || 2).await })
        };
        // Let the second call take its queue place.
        while admission.admitted.load(Ordering::Acquire) < 2 {
            tokio::task::yield_now().await;
        }
        let busy = admission.run("size_cp", || 1).await.unwrap_err();
        assert!(
            busy.contains("busy") && busy.contains("`size_cp`"),
            "{busy}"
        );
        release.send(()).expect("release the first call");
        assert_eq!(running.await.expect("joined"), Ok(()));
        assert_eq!(queued.await.expect("joined"), Ok(2));
        assert_eq!(admission.admitted.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_known_skill_is_read_while_heavy_calls_fill_the_queue() {
        use crate::catalog::{CatalogHandle, RootSource};
        use crate::tools::skills::ReadSkillInput;
        use rmcp::handler::server::wrapper::Parameters;

        let catalog = CatalogHandle::load(vec![RootSource::Embedded]);
        let server = SkillServer::with_admission(catalog, Admission::new(1, 0));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (started, is_running) = tokio::sync::oneshot::channel::<()>();
        let blocker = {
            let server = server.clone();
            tokio::spawn(async move {
                server
                    .state
                    .admission
                    .run("plan_layouts", move || {
                        let _ = started.send(());
                        let _ = wait.recv();
                    })
                    .await
            })
        };
        is_running.await.expect("heavy call started");
        let read = |name: &str| ReadSkillInput {
            name: name.into(),
            section: None,
            card: None,
            file: None,
            offset: None,
        };
        let known = server
            .read_skill(Parameters(read("moe-long-context")))
            .await
            .expect("a known skill is read on the fast path");
        let structured = known.structured_content.expect("structured answer");
        assert_eq!(structured["name"], "moe-long-context");
        let Err(unknown) = server.read_skill(Parameters(read("moe-long-contxt"))).await else {
            panic!("an unknown name waits for a core, and the queue is full");
        };
        assert!(unknown.contains("busy"), "{unknown}");
        release.send(()).expect("release");
        assert_eq!(blocker.await.expect("joined"), Ok(()));
    }
}
