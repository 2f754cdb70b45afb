//! MCP adapter: tools, resources, resource templates, prompts, completions and the Skills
//! extension (SEP-2640) over stdio ([`serve_stdio`]) or streamable HTTP ([`http::serve_http`]).
//!
//! # Adding tools
//! Tools live in `#[tool_router]` impl blocks on [`SkillServer`], one block per file, each
//! with its own router name, e.g. in `src/server/compute_tools.rs`:
//!
//! ```ignore
//! #[rmcp::tool_router(router = compute_tool_router, vis = "pub(crate)")]
//! impl SkillServer {
//!     #[rmcp::tool(name = "size_cp", description = "...",
//!         annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false))]
//!     pub async fn size_cp(&self, Parameters(input): Parameters<SizeCpInput>)
//!         -> Result<Json<SizeCpOutput>, String> {
//!         crate::tools::size_cp::size_cp(&self.catalog(), &input).map(Json).map_err(|e| e.to_string())
//!     }
//! }
//! ```
//!
//! then add the router to [`SkillServer::tool_router`] (`Self::skill_tool_router() +
//! Self::compute_tool_router()`). `self.catalog()` is the current catalog snapshot.
//!
//! # Adding prompts
//! Append a [`prompts::StaticPrompt`] in [`prompts::static_prompts`].

pub mod admission;
pub mod completion;
mod compute_tools;
pub mod http;
pub mod priority;
pub mod prompts;
pub mod resources;
pub mod schema;
mod skill_tools;
pub mod stdio;

use std::sync::{Arc, Mutex};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams,
    GetPromptResponse, GetSkillRequestParams, GetSkillResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult, PaginatedRequestParams,
    ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{tool_handler, ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};

use crate::catalog::{Catalog, CatalogHandle};
use crate::model::limits::{self, LengthLimit};

/// Refuses an over-long string before any lookup or fuzzy matching sees it.
fn within(limit: LengthLimit, value: &str) -> Result<(), McpError> {
    limit
        .check("", Some(value))
        .map_err(|error| McpError::invalid_params(error.to_string(), None))
}

/// What every clone of the server shares: the catalog and the legacy-protocol peers that
/// get list-changed notifications after a reload.
#[derive(Debug)]
pub struct ServerState {
    pub catalog: CatalogHandle,
    /// Limits heavy tool calls to the cores, with a bounded queue (`admission.rs`).
    pub admission: admission::Admission,
    legacy_peers: Mutex<Vec<Peer<RoleServer>>>,
}

/// The MCP server. Cheap to clone: the HTTP transport makes one per session or request.
#[derive(Debug, Clone)]
pub struct SkillServer {
    state: Arc<ServerState>,
    tool_router: ToolRouter<Self>,
}

const INSTRUCTIONS: &str = "Skills and a cost model for training Mixture-of-Experts models at long context.

Skills (advice, with sources): call list_skills or search_skills to find one, then read_skill (whole skill, one section, or card: true for its data). \
Skills are also resources (skill://<name>/SKILL.md) and prompts (one per skill).

Cost model (numbers for a concrete configuration; every answer has a Markdown rationale as text and the full JSON as structuredContent): \
check_feasibility evaluates one configuration (fits or not, violations with fixes, memory per component on the worst pipeline rank, step time, MFU, the binding wall); \
plan_layouts searches TP/CP/EP/PP/VPP/MBS, recompute and offload for a model, sequence length and GPU count and ranks what fits; \
size_cp answers how large context parallelism should be; \
choose_recompute finds the cheapest activation recompute that fits a memory budget; \
lookup_recipe returns the documented recipes nearest to a request with measured and predicted numbers; \
triage_oom explains why a change (before/after configurations, or a diff of launch scripts, argument lists, override files or Python recipes) went out of memory or slowed down, and what fixes it; \
compare_with_log reads a Megatron training log (its argument dump is the configuration) and sets what it measured (memory per rank, step time, the OOM message) beside the prediction, with the terms that explain each gap (the `log` prompt walks through it). \
list_models and list_hardware give the ids to use as `model` and `hardware`. \
Configurations use Megatron field names (aliases tp/pp/vpp/cp/ep/etp) or a file's text in those formats. \
Use a skill to learn why; use the cost model to check a number before recommending it.";

impl SkillServer {
    pub fn new(catalog: CatalogHandle) -> Self {
        Self::with_admission(catalog, admission::Admission::for_this_machine())
    }

    /// A server with its own heavy-call limits (tests, or a host that sizes them itself).
    pub fn with_admission(catalog: CatalogHandle, admission: admission::Admission) -> Self {
        Self {
            state: Arc::new(ServerState {
                catalog,
                admission,
                legacy_peers: Mutex::new(Vec::new()),
            }),
            tool_router: Self::tool_router(),
        }
    }

    /// Every tool of the server: one router per tool file, combined with `+`, with every
    /// input and output schema made portable (`schema.rs`) in this one place.
    pub fn tool_router() -> ToolRouter<Self> {
        let mut router = Self::skill_tool_router() + Self::compute_tool_router();
        for route in router.map.values_mut() {
            let tool = &mut route.attr;
            schema::make_portable(Arc::make_mut(&mut tool.input_schema));
            if let Some(output) = tool.output_schema.as_mut() {
                schema::make_portable(Arc::make_mut(output));
            }
        }
        router
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.state.catalog.snapshot()
    }

    pub fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    /// Send resources and prompts list-changed notifications to legacy-protocol peers after
    /// every catalog reload. Runs until the catalog handle is dropped.
    pub fn spawn_change_notifier(&self) -> tokio::task::JoinHandle<()> {
        let state = self.state.clone();
        let mut changes = state.catalog.subscribe();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let peers: Vec<Peer<RoleServer>> = match state.legacy_peers.lock() {
                    Ok(mut peers) => {
                        peers.retain(|peer| !peer.is_transport_closed());
                        peers.clone()
                    }
                    Err(_) => Vec::new(),
                };
                for peer in peers {
                    if let Err(error) = peer.notify_resource_list_changed().await {
                        tracing::debug!(%error, "resource list_changed not delivered");
                    }
                    if let Err(error) = peer.notify_prompt_list_changed().await {
                        tracing::debug!(%error, "prompt list_changed not delivered");
                    }
                }
            }
        })
    }
}

/// The `cursor` of a list request, if any.
fn cursor(request: Option<&PaginatedRequestParams>) -> Option<&str> {
    request.and_then(|request| request.cursor.as_deref())
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_completions()
        .enable_prompts()
        .enable_resources()
        .enable_tools()
        .enable_prompts_list_changed()
        .enable_resources_list_changed()
        .enable_skills_with_directory_read()
        .build()
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SkillServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(capabilities())
            .with_server_info(
                Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
                    .with_title("MoE long-context training skills"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        resources::list_resources(&self.catalog(), cursor(request.as_ref()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::resource_templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        within(limits::URI, &request.uri)?;
        resources::read_resource(&self.catalog(), &request.uri).map(Into::into)
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        resources::skill_entries(&self.catalog(), cursor(request.as_ref()))
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        within(limits::URI, &request.uri)?;
        let catalog = self.catalog();
        let name = rmcp::model::skill_name_from_uri(&request.uri).unwrap_or_default();
        match catalog.skill(name) {
            Some(skill) if skill.uri() == request.uri => {
                Ok(GetSkillResult::new(resources::skill_entry(skill)))
            }
            _ => Err(McpError::invalid_params(
                format!(
                    "no skill at `{}`; closest: {}",
                    request.uri,
                    catalog
                        .closest_skill_names(name, 5)
                        .iter()
                        .map(|name| format!("skill://{name}/SKILL.md"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            )),
        }
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceDirectoryResult, McpError> {
        within(limits::URI, &request.uri)?;
        resources::read_directory(&self.catalog(), &request.uri, request.cursor.as_deref())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let prompts = prompts::list_prompts(&self.catalog());
        let page = crate::tools::pagination::page(
            prompts.into_iter(),
            cursor(request.as_ref()),
            crate::tools::pagination::SKILLS_PAGE_SIZE,
        )
        .map_err(resources::invalid_cursor)?;
        let mut result = ListPromptsResult::with_all_items(page.items);
        result.next_cursor = page.next_cursor;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        within(limits::SKILL_NAME, &request.name)?;
        let arguments: prompts::PromptArguments = request
            .arguments
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| {
                let text = match value {
                    serde_json::Value::String(text) => text,
                    other => other.to_string(),
                };
                (key, text)
            })
            .collect();
        for text in arguments.values() {
            within(limits::PROMPT_ARGUMENT, text)?;
        }
        prompts::get_prompt(&self.catalog(), &request.name, &arguments).map(Into::into)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        within(limits::COMPLETION_VALUE, &request.argument.value)?;
        let (values, total) = completion::complete(&self.catalog(), &request);
        let has_more = total > values.len();
        let info = CompletionInfo::with_pagination(
            values,
            Some(total.min(u32::MAX as usize) as u32),
            has_more,
        )
        .map_err(|error| McpError::internal_error(error, None))?;
        Ok(CompleteResult::new(info))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(mut peers) = self.state.legacy_peers.lock() {
            peers.retain(|peer| !peer.is_transport_closed());
            peers.push(context.peer.clone());
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.state.catalog.subscribe();
        let accepted = context.accepted().clone();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if accepted.resources_list_changed == Some(true) {
                        let _ = context.sink().notify_resource_list_changed().await;
                    }
                    if accepted.prompts_list_changed == Some(true) {
                        let _ = context.sink().notify_prompt_list_changed().await;
                    }
                }
            }
        }
    }
}

/// Errors from running a transport.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("MCP session failed to start: {0}")]
    Start(String),
    #[error("MCP session ended with an error: {0}")]
    Run(String),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
}

/// Serve one client over stdin/stdout until it disconnects.
pub async fn serve_stdio(catalog: CatalogHandle) -> Result<(), ServeError> {
    let server = SkillServer::new(catalog);
    let notifier = server.spawn_change_notifier();
    // Lines rmcp would drop unanswered (not JSON, too long) are answered by the front.
    let (transport, front) = stdio::Front::start(tokio::io::stdin(), tokio::io::stdout());
    let running = match server.serve(transport).await {
        Ok(running) => running,
        Err(error) => {
            front.finish().await;
            return Err(ServeError::Start(error.to_string()));
        }
    };
    let result = running.waiting().await;
    notifier.abort();
    front.finish().await;
    result
        .map(|_| ())
        .map_err(|error| ServeError::Run(error.to_string()))
}
