//! The arguments of `#[handler(...)]`.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{LitStr, Path, Type};

/// What `#[handler(topic = "...", name = "...", state = T, crate = "...")]` says.
pub(crate) struct HandlerArgs {
    /// The default topic.
    pub(crate) topic: LitStr,
    /// The job name, if given.
    pub(crate) name: Option<LitStr>,
    /// The state type to check the arguments against, if given.
    pub(crate) state: Option<Type>,
    /// The path to `worker_core`.
    pub(crate) krate: Path,
    /// `batch(max = N, linger = "200ms")`: a batch handler.
    pub(crate) batch: Option<BatchArgs>,
}

/// What `batch(max = N, linger = "…")` says.
pub(crate) struct BatchArgs {
    pub(crate) max: usize,
    pub(crate) linger_ms: u64,
}

/// The largest batch (`worker_core::Batch::MAX`).
const MAX_BATCH: usize = 10_000;

/// The longest topic name Kafka accepts.
const MAX_TOPIC_LEN: usize = 249;

impl HandlerArgs {
    /// Parses the attribute's arguments.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut topic: Option<LitStr> = None;
        let mut name: Option<LitStr> = None;
        let mut state: Option<Type> = None;
        let mut krate: Option<Path> = None;
        let mut batch: Option<BatchArgs> = None;
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("topic") {
                set_once(&mut topic, &meta, |meta| {
                    let topic: LitStr = meta.value()?.parse()?;
                    check_topic(&topic)?;
                    Ok(topic)
                })
            } else if meta.path.is_ident("name") {
                set_once(&mut name, &meta, |meta| {
                    let name: LitStr = meta.value()?.parse()?;
                    if name.value().trim().is_empty() {
                        return Err(syn::Error::new(name.span(), "the job name is empty"));
                    }
                    Ok(name)
                })
            } else if meta.path.is_ident("state") {
                set_once(&mut state, &meta, |meta| meta.value()?.parse())
            } else if meta.path.is_ident("crate") {
                set_once(&mut krate, &meta, |meta| {
                    let path: LitStr = meta.value()?.parse()?;
                    path.parse()
                })
            } else if meta.path.is_ident("batch") {
                set_once(&mut batch, &meta, BatchArgs::parse)
            } else {
                Err(meta.error(
                    "unknown `#[handler]` argument; expected `topic`, `name`, `state`, `crate` or `batch`",
                ))
            }
        });
        syn::parse::Parser::parse2(parser, tokens)?;
        let topic = topic.ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                "`#[handler]` needs a default topic: `#[handler(topic = \"...\")]`",
            )
        })?;
        Ok(Self {
            topic,
            name,
            state,
            krate: krate.unwrap_or_else(|| syn::parse_quote!(::worker_core)),
            batch,
        })
    }
}

impl BatchArgs {
    /// Parses `batch(max = N, linger = "…")`; `linger` defaults to 200 ms.
    fn parse(meta: &ParseNestedMeta<'_>) -> syn::Result<Self> {
        let mut max: Option<usize> = None;
        let mut linger_ms: Option<u64> = None;
        meta.parse_nested_meta(|inner| {
            if inner.path.is_ident("max") {
                let lit: syn::LitInt = inner.value()?.parse()?;
                let value: usize = lit.base10_parse()?;
                if !(1..=MAX_BATCH).contains(&value) {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!("a batch has 1 to {MAX_BATCH} records"),
                    ));
                }
                set_once(&mut max, &inner, |_| Ok(value))
            } else if inner.path.is_ident("linger") {
                let lit: LitStr = inner.value()?.parse()?;
                let ms = millis(&lit.value()).ok_or_else(|| {
                    syn::Error::new(
                        lit.span(),
                        "expected a duration like \"200ms\", \"2s\" or \"1m\"",
                    )
                })?;
                set_once(&mut linger_ms, &inner, |_| Ok(ms))
            } else {
                Err(inner.error("unknown `batch` argument; expected `max` or `linger`"))
            }
        })?;
        let max = max.ok_or_else(|| meta.error("`batch` needs `max`: `batch(max = 100)`"))?;
        Ok(Self {
            max,
            linger_ms: linger_ms.unwrap_or(200),
        })
    }
}

/// `200ms`, `2s` or `1m` in milliseconds.
fn millis(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let number: u64 = number.parse().ok()?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// Parses an argument's value, refusing a second occurrence.
fn set_once<T>(
    slot: &mut Option<T>,
    meta: &ParseNestedMeta<'_>,
    parse: impl FnOnce(&ParseNestedMeta<'_>) -> syn::Result<T>,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(meta.error("this `#[handler]` argument is given twice"));
    }
    *slot = Some(parse(meta)?);
    Ok(())
}

/// Refuses a topic name Kafka would refuse.
fn check_topic(topic: &LitStr) -> syn::Result<()> {
    let value = topic.value();
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if value.is_empty() || value == "." || value == ".." {
        return Err(syn::Error::new(
            topic.span(),
            "not a valid Kafka topic name",
        ));
    }
    if value.len() > MAX_TOPIC_LEN {
        return Err(syn::Error::new(
            topic.span(),
            "a Kafka topic name has at most 249 characters",
        ));
    }
    if !value.chars().all(legal) {
        return Err(syn::Error::new(
            topic.span(),
            "a Kafka topic name has only ASCII letters, digits, `.`, `_` and `-`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use quote::{ToTokens, quote};

    use super::*;

    fn error(tokens: TokenStream) -> String {
        match HandlerArgs::parse(tokens) {
            Ok(_) => String::from("no error"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn all_arguments() -> syn::Result<()> {
        let args = HandlerArgs::parse(quote!(
            topic = "sms",
            name = "send_sms",
            state = AppState,
            crate = "::wc"
        ))?;
        assert_eq!(args.topic.value(), "sms");
        assert_eq!(
            args.name.map(|name| name.value()).as_deref(),
            Some("send_sms")
        );
        assert_eq!(args.state.to_token_stream().to_string(), "AppState");
        assert_eq!(args.krate.to_token_stream().to_string(), ":: wc");
        Ok(())
    }

    #[test]
    fn defaults() -> syn::Result<()> {
        let args = HandlerArgs::parse(quote!(topic = "a.b-c_d"))?;
        assert!(args.name.is_none() && args.state.is_none());
        assert_eq!(args.krate.to_token_stream().to_string(), ":: worker_core");
        Ok(())
    }

    #[test]
    fn errors() {
        assert!(error(quote!()).contains("needs a default topic"));
        assert!(error(quote!(name = "x")).contains("needs a default topic"));
        assert!(error(quote!(topic = "a", topic = "b")).contains("given twice"));
        assert!(error(quote!(topic = "a", retries = 3)).contains("unknown `#[handler]` argument"));
        assert!(error(quote!(topic = "sms queue")).contains("only ASCII letters"));
        assert!(error(quote!(topic = "..")).contains("not a valid Kafka topic"));
        let long = "t".repeat(250);
        assert!(error(quote!(topic = #long)).contains("at most 249"));
        assert!(error(quote!(topic = "a", name = " ")).contains("name is empty"));
        assert!(error(quote!(topic = 7)).contains("expected string literal"));
    }

    #[test]
    fn batch_arguments() -> syn::Result<()> {
        let args = HandlerArgs::parse(quote!(topic = "e", batch(max = 100, linger = "2s")))?;
        let batch = args.batch.expect("batch");
        assert_eq!((batch.max, batch.linger_ms), (100, 2_000));
        let defaulted = HandlerArgs::parse(quote!(topic = "e", batch(max = 5)))?;
        assert_eq!(defaulted.batch.map(|b| b.linger_ms), Some(200));
        assert!(error(quote!(topic = "e", batch(linger = "1s"))).contains("needs `max`"));
        assert!(error(quote!(topic = "e", batch(max = 0))).contains("1 to 10000"));
        assert!(error(quote!(topic = "e", batch(max = 10001))).contains("1 to 10000"));
        assert!(
            error(quote!(topic = "e", batch(max = 2, linger = "soon"))).contains("like \"200ms\"")
        );
        assert!(
            error(quote!(topic = "e", batch(max = 2, size = 3)))
                .contains("unknown `batch` argument")
        );
        assert!(error(quote!(topic = "e", batch(max = 2, max = 3))).contains("given twice"));
        Ok(())
    }
}
