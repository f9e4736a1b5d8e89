//! Tests of the `[llm]` and `[agent]` rules: precedence of the environment, URL and key
//! rules, and the loop's bounds.

use std::time::Duration;

use super::*;

fn raw_llm(toml_text: &str) -> RawLlm {
    toml::from_str(toml_text).expect("valid [llm] TOML")
}

fn run(raw: Option<&RawLlm>, env: &[(&str, &str)]) -> (Option<LlmConfig>, Report) {
    let env = Env::from_pairs(env.iter().copied());
    let mut report = Report::default();
    let (config, _) = llm(raw, &env, &mut report);
    (config, report)
}

fn problems(report: Report) -> Vec<(String, String)> {
    report
        .finish()
        .expect_err("problems")
        .problems
        .into_iter()
        .map(|p| (p.path, p.message))
        .collect()
}

#[test]
fn no_section_and_no_model_means_no_llm() {
    let (config, report) = run(
        None,
        &[
            ("OPENAI_API_KEY", "sk-x"),
            ("OPENAI_BASE_URL", "http://h/v1"),
        ],
    );
    assert!(config.is_none());
    assert!(report.finish().is_ok());
}

#[test]
fn the_environment_alone_configures_a_model() {
    let (config, report) = run(
        None,
        &[
            ("MCPGATE_MODEL", "gpt-4o-mini"),
            ("OPENAI_API_KEY", "sk-env-key"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
        ],
    );
    assert!(report.finish().is_ok());
    let config = config.expect("configured");
    assert_eq!(config.model, "gpt-4o-mini");
    assert_eq!(config.base_url.as_str(), "http://127.0.0.1:8000/v1");
    assert_eq!(config.api_key.expect("key").expose(), "sk-env-key");
    assert!(config.stream && config.tools);

    let (config, _) = run(None, &[("MCPGATE_MODEL", "m")]);
    let config = config.expect("configured");
    assert_eq!(config.base_url.as_str(), "https://api.openai.com/v1");
    assert!(config.api_key.is_none());
}

#[test]
fn the_file_wins_over_openai_variables_and_mcpgate_model_over_the_file() {
    let raw = raw_llm(
        r#"
        base_url = "http://127.0.0.1:9000/v1"
        model = "from-file"
        connect_timeout = "2s"
        request_timeout = "2m"
        idle_timeout = "30s"
        stream = false
        tools = false
        max_response_bytes = 65536
        "#,
    );
    let env = [
        ("OPENAI_BASE_URL", "https://api.example.com/v1"),
        ("OPENAI_API_KEY", "sk-for-another-provider"),
    ];
    let (config, report) = run(Some(&raw), &env);
    assert!(report.finish().is_ok());
    let config = config.expect("configured");
    assert_eq!(config.base_url.as_str(), "http://127.0.0.1:9000/v1");
    assert_eq!(config.model, "from-file");
    assert!(
        config.api_key.is_none(),
        "an ambient key is never sent to a server the file names"
    );
    assert_eq!(config.connect_timeout, Duration::from_secs(2));
    assert_eq!(config.request_timeout, Duration::from_secs(120));
    assert_eq!(config.idle_timeout, Duration::from_secs(30));
    assert!(!config.stream && !config.tools);
    assert_eq!(config.max_response_bytes, 65536);

    let (config, _) = run(Some(&raw), &[("MCPGATE_MODEL", "from-env")]);
    assert_eq!(config.expect("configured").model, "from-env");
}

#[test]
fn the_key_is_a_reference_never_a_literal() {
    let raw = raw_llm(
        r#"
        model = "m"
        api_key = "${GROQ_KEY}"
        headers = { "X-Team" = "${TEAM}" }
        "#,
    );
    let (config, report) = run(Some(&raw), &[("GROQ_KEY", "gsk-1234"), ("TEAM", "t1")]);
    assert!(report.finish().is_ok());
    let config = config.expect("configured");
    assert_eq!(config.api_key.expect("key").expose(), "gsk-1234");
    assert_eq!(config.headers.len(), 1);
    assert_eq!(config.headers[0].1.expose(), "t1");

    let (config, report) = run(Some(&raw), &[]);
    assert!(config.expect("configured").api_key.is_none());
    assert!(
        report
            .warnings()
            .iter()
            .any(|w| w.starts_with("llm.api_key")),
        "{:?}",
        report.warnings()
    );

    for literal in ["sk-live-TopSecret", "Bearer ${X}", "${A}${B}"] {
        let raw = raw_llm(&format!("model = \"m\"\napi_key = \"{literal}\""));
        let (_, report) = run(Some(&raw), &[]);
        let found = problems(report);
        assert_eq!(found.len(), 1, "{literal}");
        assert_eq!(found[0].0, "llm.api_key");
        assert!(!found[0].1.contains("TopSecret"));
    }
}

#[test]
fn bad_base_urls_are_refused_without_quoting_them() {
    for (url, words) in [
        ("http://user:hunter2@127.0.0.1:8000/v1", "user or password"),
        ("ftp://127.0.0.1/v1", "http or https"),
        ("not a url", "not a valid URL"),
        ("http://127.0.0.1/v1?api-version=1", "query"),
    ] {
        let raw = raw_llm(&format!("model = \"m\"\nbase_url = \"{url}\""));
        let (_, report) = run(Some(&raw), &[]);
        let found = problems(report);
        assert_eq!(found.len(), 1, "{url}");
        assert_eq!(found[0].0, "llm.base_url");
        assert!(found[0].1.contains(words), "{url}: {}", found[0].1);
        assert!(!found[0].1.contains("hunter2"));
    }
    let (_, report) = run(
        None,
        &[("MCPGATE_MODEL", "m"), ("OPENAI_BASE_URL", "file:///x")],
    );
    assert_eq!(problems(report)[0].0, "OPENAI_BASE_URL");
}

#[test]
fn missing_model_headers_and_ranges() {
    let raw = raw_llm(
        r#"
        api_key = "${K}"
        headers = { Authorization = "Bearer ${K}", Accept = "text/plain" }
        idle_timeout = "0s"
        max_response_bytes = 10
        "#,
    );
    let (_, report) = run(Some(&raw), &[("K", "k")]);
    let paths: Vec<String> = problems(report).into_iter().map(|p| p.0).collect();
    assert_eq!(
        paths,
        [
            "llm.model",
            "llm.headers.Accept",
            "llm.headers.Authorization",
            "llm.idle_timeout",
            "llm.max_response_bytes"
        ]
    );
}

#[test]
fn agent_bounds() {
    let mut report = Report::default();
    let config = agent(&RawAgent::default(), &mut report);
    assert_eq!(config, AgentConfig::default());

    let raw: RawAgent = toml::from_str(
        r#"
        max_rounds = 5
        max_tool_output_chars = 2000
        max_repeats = 2
        max_argument_retries = 0
        preprompt = "Be brief."
        max_running_turns = 4
        max_messages = 50
        "#,
    )
    .expect("valid [agent]");
    let config = agent(&raw, &mut report);
    assert!(report.finish().is_ok());
    assert_eq!(
        config,
        AgentConfig {
            max_rounds: 5,
            max_tool_output_chars: 2000,
            max_repeats: 2,
            max_argument_retries: 0,
            preprompt: Some("Be brief.".into()),
            max_running_turns: 4,
            max_messages: 50,
        }
    );

    let raw: RawAgent =
        toml::from_str("max_rounds = 0\nmax_argument_retries = 6\nmax_messages = 0")
            .expect("valid TOML");
    let mut report = Report::default();
    let config = agent(&raw, &mut report);
    assert_eq!(config.max_rounds, AgentConfig::default().max_rounds);
    let paths: Vec<String> = problems(report).into_iter().map(|p| p.0).collect();
    assert_eq!(
        paths,
        [
            "agent.max_rounds",
            "agent.max_argument_retries",
            "agent.max_messages"
        ]
    );
    assert!(toml::from_str::<RawAgent>("max_round = 3").is_err());
    assert!(toml::from_str::<RawLlm>("modle = \"m\"").is_err());
}

fn run_models(toml_text: &str, env: &[(&str, &str)]) -> (Option<LlmConfig>, ModelsConfig, Report) {
    let raw = raw_llm(toml_text);
    let env = Env::from_pairs(env.iter().copied());
    let mut report = Report::default();
    let (llm, models) = llm(Some(&raw), &env, &mut report);
    (llm, models, report)
}

#[test]
fn several_models_inherit_from_llm_but_not_a_key_for_another_server() {
    let (llm, models, report) = run_models(
        r#"
        base_url = "http://127.0.0.1:8000/v1"
        api_key = "${MAIN_KEY}"
        request_timeout = "2m"
        default = "big"
        tools_model = "big"

        [[models]]
        name = "small"
        tools = false
        max_running_turns = 4

        [[models]]
        name = "big"
        model = "org/big-model:latest"

        [[models]]
        name = "elsewhere"
        base_url = "http://127.0.0.1:9000/v1"
        "#,
        &[("MAIN_KEY", "sk-main")],
    );
    assert!(report.finish().is_ok());
    let names: Vec<&str> = models.list.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["small", "big", "elsewhere"]);
    let [small, big, elsewhere] = &models.list[..] else {
        panic!("three models")
    };
    assert_eq!(small.llm.model, "small", "the model defaults to the name");
    assert!(!small.llm.tools && big.llm.tools);
    assert_eq!(small.max_running_turns, Some(4));
    assert_eq!(big.llm.model, "org/big-model:latest");
    assert_eq!(big.llm.request_timeout, Duration::from_secs(120));
    assert_eq!(
        big.llm.api_key.as_ref().expect("inherited").expose(),
        "sk-main"
    );
    assert_eq!(elsewhere.llm.base_url.as_str(), "http://127.0.0.1:9000/v1");
    assert!(
        elsewhere.llm.api_key.is_none(),
        "a model on another server inherits no key"
    );
    assert_eq!(models.default.as_deref(), Some("big"));
    assert_eq!(models.tools_model.as_deref(), Some("big"));
    assert_eq!(llm.expect("the default").model, "org/big-model:latest");
}

#[test]
fn broken_model_lists_are_reported_with_their_paths() {
    let (_, _, report) = run_models(
        r#"
        model = "top"
        default = "nope"
        tools_model = "plain"
        [[models]]
        name = "plain"
        tools = false
        [[models]]
        name = "plain"
        [[models]]
        name = "has space"
        [[models]]
        model = "unnamed"
        [[models]]
        name = "slow"
        request_timeout = "forever"
        "#,
        &[],
    );
    let found = problems(report);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    for path in [
        "llm.model",
        "llm.default",
        "llm.tools_model",
        "llm.models[1].name",
        "llm.models[2].name",
        "llm.models[3].name",
        "llm.models[4].request_timeout",
    ] {
        assert!(paths.contains(&path), "{path} in {found:?}");
    }
    let (_, _, report) = run_models("models = []", &[]);
    assert_eq!(problems(report)[0].0, "llm.models");
}

#[test]
fn a_tenants_models_are_configured_ones() {
    let (llm, models, _) = run_models(
        r#"
        [[models]]
        name = "small"
        [[models]]
        name = "big"
        "#,
        &[],
    );
    let access = super::super::AccessConfig {
        tenants: vec![super::super::TenantAccess {
            tenant: "acme".into(),
            servers: Vec::new(),
            models: Some(vec!["small".into(), "huge".into()]),
        }],
        ..Default::default()
    };
    let mut report = Report::default();
    check_tenant_models(&access, llm.as_ref(), &models, &mut report);
    let found = problems(report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "access.tenants.acme.models");
    assert!(found[0].1.contains("huge"), "{found:?}");
}

#[test]
fn prices_go_in_pairs_within_bounds_and_are_never_inherited() {
    let (_, models, report) = run_models(
        r#"
        [[models]]
        name = "priced"
        price_per_mtok_in = 0.5
        price_per_mtok_out = 1.5
        [[models]]
        name = "cached"
        price_per_mtok_in = 1.0
        price_per_mtok_out = 2.0
        price_per_mtok_cached = 0.25
        [[models]]
        name = "free"
        "#,
        &[],
    );
    assert!(report.finish().is_ok());
    let price = |i: usize| models.list[i].price;
    let priced = price(0).expect("priced");
    assert_eq!(
        priced.per_mtok_cached, 0.5,
        "cached defaults to the input price"
    );
    assert_eq!(price(1).expect("cached").per_mtok_cached, 0.25);
    assert_eq!(price(2), None);
    // 1,000 prompt tokens (400 cached) and 100 completion tokens, in millionths.
    assert_eq!(price(1).expect("cached").cost_micros(1_000, 100, 400), 900);

    let (_, _, report) = run_models(
        r#"
        price_per_mtok_in = 1.0
        price_per_mtok_out = 1.0
        [[models]]
        name = "half"
        price_per_mtok_in = 1.0
        [[models]]
        name = "negative"
        price_per_mtok_in = -1.0
        price_per_mtok_out = 1.0
        "#,
        &[],
    );
    let paths: Vec<String> = problems(report).into_iter().map(|(p, _)| p).collect();
    for path in [
        "llm.price_per_mtok_in",
        "llm.models[0].price_per_mtok_in",
        "llm.models[1].price_per_mtok_in",
    ] {
        assert!(paths.iter().any(|p| p == path), "{path} in {paths:?}");
    }
}
