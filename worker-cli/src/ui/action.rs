//! The form of a dashboard action, checked before any handler sees it: parsed, and its CSRF token,
//! origin and session checked by the guard (a refusal is the page that says why).

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};

use super::Dashboard;
use super::params::Params;
use crate::telemetry::Client;

/// An action's form that the guard let through, and the client that sent it.
pub(crate) struct ActionForm {
    pub(crate) params: Params,
    pub(crate) client: Option<Client>,
}

impl FromRequest<Arc<Dashboard>> for ActionForm {
    type Rejection = Response;

    async fn from_request(request: Request, dashboard: &Arc<Dashboard>) -> Result<Self, Response> {
        let client = request.extensions().get::<Client>().copied();
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, dashboard)
            .await
            .map_err(IntoResponse::into_response)?;
        let params = Params::parse(&body);
        dashboard
            .guard
            .act(&headers, params.get("csrf"), SystemTime::now())
            .map_err(|refusal| dashboard.refused(refusal))?;
        Ok(Self { params, client })
    }
}
