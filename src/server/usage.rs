//! `GET /api/v1/usage`: calls, errors, latency, confirmations, tokens and cost per group over
//! a time range (see [`crate::store::usage`]). Administrators read their scope (an operator
//! every tenant, a tenant's admin its tenant); everyone else reads their own usage.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use axum::http::StatusCode;
use axum::{
    Json,
    extract::{Query, State, rejection::QueryRejection},
};
use serde::Deserialize;
use serde_json::Value;

use super::{ApiError, AppState};
use crate::{
    policy::{Admin, CallContext},
    store::{
        parse_instant,
        usage::{Dim, Interval, UsageQuery, UsageRows, report},
    },
};

/// The range when the request names none.
const DEFAULT_RANGE: Duration = Duration::from_secs(30 * 86_400);
/// Longest range: a year and a bit.
const MAX_RANGE: Duration = Duration::from_secs(400 * 86_400);
/// Longest range split by the hour.
const MAX_HOURLY_RANGE: Duration = Duration::from_secs(31 * 86_400);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UsageParams {
    since: Option<String>,
    until: Option<String>,
    /// Comma-separated: `tenant`, `user`, `server`, `tool`, `model`.
    #[serde(rename = "groupBy", alias = "group_by")]
    group_by: Option<String>,
    /// `hour` or `day`: also split by time.
    interval: Option<String>,
    /// An operator's choice of tenant.
    tenant: Option<String>,
    /// An administrator's choice of user.
    user: Option<String>,
}

/// The query `params` ask for, as `ctx` may ask it; `None` when it names someone else's
/// usage (answered as nothing, like the audit log answers).
fn usage_query(
    params: UsageParams,
    ctx: &CallContext,
    admin: Admin,
    now: SystemTime,
) -> Result<Option<UsageQuery>, ApiError> {
    let at = |name: &str, text: Option<String>| {
        text.map(|text| {
            parse_instant(&text).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "`{name}` must be an RFC 3339 time like 2026-12-01T18:00:00Z \
                     (or seconds since the epoch)"
                ))
            })
        })
        .transpose()
    };
    let until = at("until", params.until)?.unwrap_or(now);
    let since = at("since", params.since)?.unwrap_or(until - DEFAULT_RANGE);
    let range = until
        .duration_since(since)
        .map_err(|_| ApiError::bad_request("`since` must be before `until`"))?;
    if range > MAX_RANGE {
        return Err(ApiError::bad_request(
            "the range is at most 400 days: narrow `since` and `until`",
        ));
    }
    let mut group_by = Vec::new();
    for name in params
        .group_by
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let dim = Dim::parse(name).ok_or_else(|| {
            ApiError::bad_request(
                "`groupBy` takes tenant, user, server, tool and model, comma-separated",
            )
        })?;
        if !group_by.contains(&dim) {
            group_by.push(dim);
        }
    }
    let interval = match params.interval.as_deref() {
        None => None,
        Some("day") => Some(Interval::Day),
        Some("hour") if range > MAX_HOURLY_RANGE => {
            return Err(ApiError::bad_request(
                "`interval=hour` covers at most 31 days: use `day`, or a shorter range",
            ));
        }
        Some("hour") => Some(Interval::Hour),
        Some(_) => return Err(ApiError::bad_request("`interval` is `hour` or `day`")),
    };
    let mine = |asked: Option<String>, own: &str| match asked {
        Some(other) if other != own => None,
        _ => Some(Some(own.to_owned())),
    };
    let (tenant, user) = match admin {
        Admin::Operator => (params.tenant, params.user),
        Admin::Tenant => match mine(params.tenant, &ctx.tenant) {
            Some(tenant) => (tenant, params.user),
            None => return Ok(None),
        },
        Admin::None => match (
            mine(params.tenant, &ctx.tenant),
            mine(params.user, &ctx.user),
        ) {
            (Some(tenant), Some(user)) => (tenant, user),
            _ => return Ok(None),
        },
    };
    Ok(Some(UsageQuery {
        since,
        until,
        group_by,
        interval,
        tenant,
        user,
    }))
}

pub(super) async fn usage(
    State(state): State<AppState>,
    axum::Extension(ctx): axum::Extension<Arc<CallContext>>,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) = params.map_err(|_| {
        ApiError::bad_request(
            "usage takes since, until, groupBy, interval, tenant and user, each once",
        )
    })?;
    let gateway = state.gateway.current();
    let admin = gateway.administers(&ctx);
    let Some(query) = usage_query(params, &ctx, admin, SystemTime::now())? else {
        // Someone else's usage: nothing, over the range asked.
        let empty = UsageQuery {
            since: SystemTime::now() - DEFAULT_RANGE,
            until: SystemTime::now(),
            group_by: Vec::new(),
            interval: None,
            tenant: None,
            user: None,
        };
        return Ok(Json(report(&UsageRows::default(), &empty)));
    };
    let rows = gateway.usage_store().usage(&query).await.map_err(|err| {
        tracing::error!(error = %err, "usage query failed");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "usage is unavailable",
        )
    })?;
    Ok(Json(report(&rows, &query)))
}
