//! One chat turn (DESIGN.md "One chat turn"): model request, tool calls through the gate,
//! results back to the model, for at most `max_rounds` rounds; then one last request without
//! tools. Cancellation is checked at every boundary.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::SystemTime,
};

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{
    AgentEvent, Usage,
    emitter::Emitter,
    executor::{PlannedCall, Round, ToolFailure},
    llm::{ChatRequest, Completion, LlmEvent, Message, ToolCall},
    output::ImageNames,
    preprompt::preprompt,
    runner::{AgentError, Answer, Inner, ToolChoice, TurnOptions},
};
use crate::{catalog::CatalogTool, gateway::apps, policy::CallContext};

/// Calls run from one model reply; more are answered with an error (the client bounds a
/// reply's calls too; this keeps one round's concurrency modest).
const MAX_CALLS_PER_ROUND: usize = 32;

/// Longest call id kept as the model sent it; ids are used in URLs (approvals), so other
/// ids are replaced.
const MAX_CALL_ID_CHARS: usize = 64;

/// Characters of invalid arguments shown in the `tool_call` event.
const MAX_SHOWN_ARGUMENT_CHARS: usize = 2000;

/// Tool error code of a call whose arguments were not valid JSON.
const INVALID_JSON: &str = "invalid_json_arguments";

pub(crate) struct Turn {
    agent: Arc<Inner>,
    ctx: CallContext,
    options: TurnOptions,
    events: Emitter,
    /// Model requests made so far (the `round` of `round_start`).
    requests: u32,
    usage: Option<Usage>,
    images: ImageNames,
    call_ids: HashSet<String>,
}

impl Turn {
    pub(crate) fn new(
        agent: Arc<Inner>,
        ctx: CallContext,
        options: TurnOptions,
        events: Emitter,
    ) -> Turn {
        Turn {
            agent,
            ctx,
            options,
            events,
            requests: 0,
            usage: None,
            images: ImageNames::default(),
            call_ids: HashSet::new(),
        }
    }

    /// Runs the turn and ends its events with `final` or `error`, then `done`.
    pub(crate) async fn run_to_events(self, messages: Vec<Message>) {
        let events = self.events.clone();
        let end = match self.run(messages).await {
            Ok(answer) => AgentEvent::Final {
                message: answer.message,
                usage: answer.usage,
            },
            Err(err) => AgentEvent::Error {
                code: err.code().to_owned(),
                message: err.to_string(),
            },
        };
        events.emit(end).await;
        events.emit(AgentEvent::Done).await;
    }

    pub(crate) async fn run(mut self, messages: Vec<Message>) -> Result<Answer, AgentError> {
        let tools = if self.agent.tools_supported {
            self.agent.gateway.model_tools(&self.ctx).await
        } else {
            Vec::new()
        };
        // Offered: what the model may call. Withheld: tools the caller may use that this
        // turn does not offer (an MCP App's own tools, servers the conversation left out);
        // a call naming one is answered as the gate answers a name it does not know.
        let (tools, withheld) = super::models::offered(tools, self.options.servers.as_deref());
        let definitions: Vec<Value> = tools.iter().map(definition).collect();
        let names: Vec<String> = tools.iter().map(|t| t.function_name.clone()).collect();
        let now = self.options.now.unwrap_or_else(SystemTime::now);
        let preamble = preprompt(
            self.agent.config.preprompt.as_deref(),
            &names,
            &self.options.time_zone.describe(now),
        );
        let mut history = Vec::with_capacity(messages.len() + 1);
        history.push(Message::system(preamble));
        history.extend(messages);
        if definitions.is_empty() {
            // Plain generation: the model cannot call tools, so none are offered (the gate
            // is not bypassed: there is nothing to pass it).
            let completion = self.ask(&history, Vec::new(), None).await?;
            return Ok(self.answer(completion));
        }
        let max_rounds = self.agent.config.max_rounds;
        let mut repeats = Repeats::default();
        let mut invalid_replies = 0;
        let mut round = 0;
        while round < max_rounds {
            let choice = match (&self.options.tool_choice, round) {
                (ToolChoice::Force(name), 0) => {
                    json!({ "type": "function", "function": { "name": name } })
                }
                _ => json!("auto"),
            };
            let completion = self
                .ask(&history, definitions.clone(), Some(choice))
                .await?;
            if completion.tool_calls.is_empty() {
                return Ok(self.answer(completion));
            }
            let (calls, echoed, invalid) = self.plan(&completion.tool_calls, &tools, &withheld);
            if !invalid.is_empty() {
                invalid_replies += 1;
                self.report_invalid(&completion, &calls, &invalid).await;
                if invalid_replies > self.agent.config.max_argument_retries {
                    return Err(AgentError::InvalidToolArguments {
                        times: invalid_replies,
                    });
                }
                // The reply is dropped (its broken JSON is never sent back) and the model
                // asked again; retries are bounded apart from rounds.
                history.push(Message::user(invalid_note(&completion, &calls, &invalid)));
                continue;
            }
            history.push(Message::assistant(completion.content, echoed));
            for call in &calls {
                self.events
                    .emit(AgentEvent::ToolCall {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        server: call.server.clone(),
                        arguments: call.arguments.clone(),
                        view: call.view.clone(),
                    })
                    .await;
            }
            let texts = self.execute(&calls).await?;
            for (call, text) in calls.iter().zip(texts) {
                let times = repeats.count(call, &text);
                history.push(Message::tool(call.call_id.clone(), text));
                if times > self.agent.config.max_repeats {
                    return Err(AgentError::RepeatedCall {
                        tool: call.tool.clone(),
                        times,
                    });
                }
            }
            round += 1;
        }
        history.push(Message::user(format!(
            "[gateway] The limit of {max_rounds} tool rounds for this turn is reached. Answer \
             now from what you have; no more tools can be called."
        )));
        let completion = self.ask(&history, Vec::new(), None).await?;
        Ok(self.answer(completion))
    }

    fn answer(&self, completion: Completion) -> Answer {
        Answer {
            message: completion.content,
            usage: self.usage,
        }
    }

    /// One model request; text is streamed to the user until a tool call appears.
    async fn ask(
        &mut self,
        history: &[Message],
        tools: Vec<Value>,
        tool_choice: Option<Value>,
    ) -> Result<Completion, AgentError> {
        let cancel = self.options.cancel.clone();
        if cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }
        self.events
            .emit(AgentEvent::RoundStart {
                round: self.requests,
            })
            .await;
        self.requests += 1;
        let request = ChatRequest {
            messages: history.to_vec(),
            tools,
            tool_choice,
            options: self.options.sampling.clone(),
        };
        // Dropping the stream (on cancel) aborts the request.
        let mut stream = self.agent.llm.stream(&request);
        let mut calling = false;
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(AgentError::Cancelled),
                next = stream.next() => next,
            };
            match next {
                Some(Ok(LlmEvent::Text(text))) => {
                    if !calling && !text.is_empty() {
                        self.events.emit(AgentEvent::TextDelta { text }).await;
                    }
                }
                Some(Ok(LlmEvent::Reasoning(text))) => {
                    if !text.is_empty() {
                        self.events.emit(AgentEvent::ReasoningDelta { text }).await;
                    }
                }
                Some(Ok(LlmEvent::ToolCallStarted)) => calling = true,
                Some(Ok(LlmEvent::Finished(completion))) => {
                    self.usage = add_usage(self.usage, completion.usage);
                    return Ok(completion);
                }
                Some(Err(err)) => {
                    return Err(AgentError::Model {
                        code: err.code().to_owned(),
                        message: err.to_string(),
                    });
                }
                None => {
                    return Err(AgentError::Model {
                        code: "llm_bad_response".to_owned(),
                        message: "the model's response ended without a completion".to_owned(),
                    });
                }
            }
        }
    }

    /// Runs a round's calls through the gate.
    async fn execute(&mut self, calls: &[PlannedCall]) -> Result<Vec<String>, AgentError> {
        let agent = self.agent.clone();
        let round = Round {
            gateway: &agent.gateway,
            ctx: &self.ctx,
            approvals: &agent.approvals,
            policy: self.options.approvals,
            etas: &agent.etas,
            events: &self.events,
            cancel: &self.options.cancel,
            max_chars: agent.config.max_tool_output_chars,
        };
        round
            .run(calls, &mut self.images)
            .await
            .map_err(|_| AgentError::Cancelled)
    }

    /// The calls of a reply as they will run (ids made unique and URL-safe, names resolved
    /// for the events), the calls to echo back to the model with those ids, and the
    /// indexes of calls whose arguments are not valid JSON.
    fn plan(
        &mut self,
        calls: &[ToolCall],
        tools: &[CatalogTool],
        withheld: &[CatalogTool],
    ) -> (Vec<PlannedCall>, Vec<ToolCall>, Vec<usize>) {
        let mut planned = Vec::with_capacity(calls.len());
        let mut echoed = Vec::with_capacity(calls.len());
        let mut invalid = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let call_id = self.unique_id(&call.id);
            let resolved = tools
                .iter()
                .find(|t| t.function_name == call.name || t.canonical == call.name);
            let arguments = match parse_arguments(&call.arguments) {
                Ok(arguments) => arguments,
                Err(()) => {
                    invalid.push(index);
                    Value::String(
                        call.arguments
                            .chars()
                            .take(MAX_SHOWN_ARGUMENT_CHARS)
                            .collect(),
                    )
                }
            };
            let refused = if index >= MAX_CALLS_PER_ROUND {
                Some(ToolFailure::new(
                    "limit_exceeded",
                    format!("not run: at most {MAX_CALLS_PER_ROUND} tool calls run from one reply"),
                ))
            } else if resolved.is_none()
                && withheld
                    .iter()
                    .any(|t| t.function_name == call.name || t.canonical == call.name)
            {
                // As the gate answers a name it does not know: to the model it is none.
                Some(
                    crate::gateway::GatewayError::NotFound {
                        name: call.name.clone(),
                    }
                    .into(),
                )
            } else {
                None
            };
            planned.push(PlannedCall {
                call_id: call_id.clone(),
                name: call.name.clone(),
                tool: resolved.map_or_else(|| call.name.clone(), |t| t.canonical.clone()),
                server: resolved.map(|t| t.server.to_string()),
                view: resolved.and_then(|t| {
                    apps::view_uri(&t.upstream).map(|uri| apps::merged_uri(&t.server, uri))
                }),
                arguments,
                refused,
            });
            echoed.push(ToolCall {
                id: call_id,
                ..call.clone()
            });
        }
        (planned, echoed, invalid)
    }

    /// The model's id when it is usable and new in this turn, else a fresh one.
    fn unique_id(&mut self, id: &str) -> String {
        let usable = !id.is_empty()
            && id.len() <= MAX_CALL_ID_CHARS
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !self.call_ids.contains(id);
        let id = if usable {
            id.to_owned()
        } else {
            loop {
                let fresh = format!("call_{}", crate::digest::random_hex(6));
                if !self.call_ids.contains(&fresh) {
                    break fresh;
                }
            }
        };
        self.call_ids.insert(id.clone());
        id
    }

    /// Shows the calls whose arguments were not valid JSON, each with its error.
    async fn report_invalid(
        &self,
        completion: &Completion,
        calls: &[PlannedCall],
        invalid: &[usize],
    ) {
        let cut = completion.finish_reason.as_deref() == Some("length");
        for call in invalid.iter().filter_map(|i| calls.get(*i)) {
            self.events
                .emit(AgentEvent::ToolCall {
                    call_id: call.call_id.clone(),
                    tool: call.tool.clone(),
                    server: call.server.clone(),
                    arguments: call.arguments.clone(),
                    view: call.view.clone(),
                })
                .await;
            let message = if cut {
                "the model's arguments are not valid JSON (its reply was cut off at its length \
                 limit); the call was not run and the model was asked again"
            } else {
                "the model's arguments are not valid JSON; the call was not run and the model \
                 was asked again"
            };
            self.events
                .emit(AgentEvent::ToolError {
                    call_id: call.call_id.clone(),
                    tool: call.tool.clone(),
                    code: INVALID_JSON.to_owned(),
                    message: message.to_owned(),
                    elapsed_ms: 0,
                })
                .await;
        }
    }
}

/// The model's arguments as JSON; an empty text means no arguments (servers send `""` for
/// calls without any). Anything else that does not parse is refused, never replaced by `{}`.
fn parse_arguments(text: &str) -> Result<Value, ()> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text).map_err(|_| ())
}

/// What the model is told when its reply had arguments that are not valid JSON.
fn invalid_note(completion: &Completion, calls: &[PlannedCall], invalid: &[usize]) -> String {
    let names: Vec<String> = invalid
        .iter()
        .filter_map(|i| calls.get(*i))
        .map(|c| format!("`{}`", c.name))
        .collect();
    let cut = if completion.finish_reason.as_deref() == Some("length") {
        " (your reply was cut off at the length limit)"
    } else {
        ""
    };
    format!(
        "[gateway] Your last reply was not used: the arguments of {} were not valid JSON{cut}. \
         Reply again, with complete and valid JSON arguments for each tool call, and keep them \
         short.",
        names.join(", ")
    )
}

/// A catalog tool as the model is offered it (OpenAI's function shape).
fn definition(tool: &CatalogTool) -> Value {
    let mut function = json!({
        "name": tool.function_name,
        "parameters": &*tool.input_schema,
    });
    let description = tool
        .upstream
        .description
        .as_deref()
        .or(tool.upstream.title.as_deref());
    if let Some(description) = description {
        function["description"] = json!(description);
    }
    json!({ "type": "function", "function": function })
}

fn add_usage(total: Option<Usage>, more: Option<Usage>) -> Option<Usage> {
    match (total, more) {
        (Some(a), Some(b)) => Some(Usage {
            prompt_tokens: a.prompt_tokens.saturating_add(b.prompt_tokens),
            completion_tokens: a.completion_tokens.saturating_add(b.completion_tokens),
            total_tokens: a.total_tokens.saturating_add(b.total_tokens),
            cached_tokens: a.cached_tokens.saturating_add(b.cached_tokens),
        }),
        (a, b) => a.or(b),
    }
}

/// How often each (tool, arguments, result) was seen in the turn.
#[derive(Default)]
struct Repeats {
    seen: HashMap<String, u32>,
}

impl Repeats {
    fn count(&mut self, call: &PlannedCall, text: &str) -> u32 {
        let key = crate::digest::sha256_hex(
            format!(
                "{}\0{}\0{text}",
                call.name,
                crate::catalog::args_hash(&call.arguments)
            )
            .as_bytes(),
        );
        let times = self.seen.entry(key).or_insert(0);
        *times += 1;
        *times
    }
}
