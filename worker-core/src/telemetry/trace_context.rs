//! W3C Trace Context (`traceparent`, `tracestate`) in record headers: a record's span continues the
//! producer's trace, and a dead letter carries on the trace of the attempt that failed it.

use std::str::FromStr;

use bytes::Bytes;
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::source::Header;

/// The header holding the W3C trace parent.
pub const TRACEPARENT: &str = "traceparent";
/// The header holding the W3C vendor trace state.
pub const TRACESTATE: &str = "tracestate";

/// Parses a W3C `traceparent` value (`00-<trace id>-<span id>-<flags>`) into a remote span
/// context; `None` for anything malformed, an all-zero id, or version `ff`. Later versions are
/// read as version 00, as the specification asks, ignoring what follows the flags.
pub fn parse_traceparent(value: &[u8]) -> Option<SpanContext> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let mut parts = value.splitn(5, '-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    let rest = parts.next();
    if !is_hex(version, 2) || version == "ff" {
        return None;
    }
    if version == "00" && rest.is_some() {
        return None;
    }
    if !is_hex(trace_id, 32) || !is_hex(span_id, 16) || !is_hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

/// Lowercase hex of exactly `len` characters.
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The `traceparent` value of `context` (version 00).
pub fn format_traceparent(context: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

fn header<'h>(headers: &'h [Header], key: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .rev()
        .find(|h| &*h.key == key)
        .and_then(|h| h.value.as_deref())
}

/// The producer's context from a record's headers, if it carries a valid `traceparent`.
pub(crate) fn remote_parent(headers: &[Header]) -> Option<Context> {
    let parent = parse_traceparent(header(headers, TRACEPARENT)?)?;
    let state = header(headers, TRACESTATE)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| TraceState::from_str(v).ok())
        .unwrap_or_default();
    let parent = SpanContext::new(
        parent.trace_id(),
        parent.span_id(),
        parent.trace_flags(),
        true,
        state,
    );
    Some(Context::new().with_remote_span_context(parent))
}

/// Makes `span` continue the trace in `headers`, when it is recorded and they carry one.
pub(crate) fn continue_trace(span: &Span, headers: &[Header]) {
    if span.is_disabled() {
        return;
    }
    if let Some(parent) = remote_parent(headers) {
        // Fails only when no OpenTelemetry layer is installed: then there is nothing to link.
        let _ = span.set_parent(parent);
    }
}

/// Points the `traceparent` in `headers` at `span` (the attempt that dead-letters the record), so
/// the dead letter and its replay stay in the same trace. Unchanged when `span` is not exported
/// through OpenTelemetry.
pub(crate) fn stamp(span: &Span, headers: &mut Vec<Header>) {
    if span.is_disabled() {
        return;
    }
    let context = span.context();
    let current = context.span();
    let current = current.span_context();
    if !current.is_valid() {
        return;
    }
    let value = Some(Bytes::from(format_traceparent(current)));
    match headers.iter_mut().rev().find(|h| &*h.key == TRACEPARENT) {
        Some(existing) => existing.value = value,
        None => headers.push(Header {
            key: TRACEPARENT.into(),
            value,
        }),
    }
}

/// The current span's trace context as `traceparent` and `tracestate` header values, when the
/// span is exported through OpenTelemetry: what a producer sends along so that the job continues
/// the trace that enqueued it.
#[cfg(feature = "rdkafka")]
pub(crate) fn current_trace_context() -> Option<(String, Option<String>)> {
    let span = Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let current = context.span();
    let current = current.span_context();
    if !current.is_valid() {
        return None;
    }
    let state = current.trace_state().header();
    Some((
        format_traceparent(current),
        (!state.is_empty()).then_some(state),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_the_specification_example() {
        let context = parse_traceparent(VALID.as_bytes()).expect("valid");
        assert_eq!(
            context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex")
        );
        assert_eq!(
            context.span_id(),
            SpanId::from_hex("00f067aa0ba902b7").expect("hex")
        );
        assert!(context.is_sampled());
        assert!(context.is_remote());
        assert_eq!(format_traceparent(&context), VALID);
    }

    #[test]
    fn rejects_malformed_values_without_panicking() {
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47é6-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad.as_bytes()).is_none(), "{bad:?}");
        }
        assert!(parse_traceparent(&[0xff, 0xfe, 0x00]).is_none());
    }

    #[test]
    fn later_versions_are_read_as_version_00() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future";
        assert!(parse_traceparent(later.as_bytes()).is_some());
    }

    #[test]
    fn the_last_traceparent_header_wins_and_tracestate_rides_along() {
        let headers = vec![
            Header {
                key: TRACEPARENT.into(),
                value: Some(Bytes::from_static(b"garbage")),
            },
            Header {
                key: TRACESTATE.into(),
                value: Some(Bytes::from_static(b"vendor=abc")),
            },
            Header {
                key: TRACEPARENT.into(),
                value: Some(Bytes::from_static(VALID.as_bytes())),
            },
        ];
        let context = remote_parent(&headers).expect("a parent");
        let span = context.span();
        let parent = span.span_context();
        assert_eq!(format_traceparent(parent), VALID);
        assert_eq!(parent.trace_state().get("vendor"), Some("abc"));
    }
}
