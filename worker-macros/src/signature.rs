//! Checks a handler function's signature before anything is generated.

use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type};

/// The most arguments a handler may take (`worker_core::handler::Handler` is implemented up to
/// this many).
pub(crate) const MAX_ARGS: usize = 12;

/// Extractors that take the payload: they can only be the last argument.
const PAYLOAD_EXTRACTORS: &[&str] = &["Json", "Bytes", "String", "Job"];

/// A handler signature that passed the syntactic checks.
pub(crate) struct HandlerSignature {
    /// The argument types, in order.
    pub(crate) args: Vec<Type>,
    /// The declared return type; `None` for `()`.
    pub(crate) output: Option<Type>,
    /// `T` of the first `State<T>` argument.
    pub(crate) state: Option<Type>,
}

impl HandlerSignature {
    /// Checks `item` and collects its argument types. Every problem found is reported, each on
    /// the span of what is wrong.
    pub(crate) fn check(item: &ItemFn) -> syn::Result<Self> {
        let sig = &item.sig;
        let mut errors = Errors::default();
        if sig.asyncness.is_none() {
            errors.push(syn::Error::new(
                sig.fn_token.span,
                "a `#[handler]` function must be an `async fn`",
            ));
        }
        if let Some(constness) = &sig.constness {
            errors.push(syn::Error::new(
                constness.span,
                "a `#[handler]` function cannot be `const`",
            ));
        }
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            errors.push(syn::Error::new_spanned(
                &sig.generics,
                "a `#[handler]` function cannot be generic; take what varies from `State<_>`",
            ));
        }
        if let Some(variadic) = &sig.variadic {
            errors.push(syn::Error::new(
                variadic.span(),
                "a `#[handler]` function cannot be variadic",
            ));
        }
        let count = sig.inputs.len();
        let mut args = Vec::with_capacity(count);
        for (index, input) in sig.inputs.iter().enumerate() {
            let ty = match input {
                FnArg::Receiver(receiver) => {
                    errors.push(syn::Error::new(
                        receiver.span(),
                        "a `#[handler]` function cannot take `self`; use a free function",
                    ));
                    continue;
                }
                FnArg::Typed(typed) => &*typed.ty,
            };
            if index == MAX_ARGS {
                errors.push(syn::Error::new_spanned(
                    input,
                    format!("a handler takes at most {MAX_ARGS} arguments"),
                ));
            }
            if let Err(error) = check_argument(ty, index + 1 == count) {
                errors.push(error);
            }
            args.push(ty.clone());
        }
        let output = match &sig.output {
            ReturnType::Default => None,
            ReturnType::Type(_, ty) => Some((**ty).clone()),
        };
        let state = args.iter().find_map(state_type);
        errors.finish()?;
        Ok(Self {
            args,
            output,
            state,
        })
    }
}

/// Checks what can be checked of one argument type without the compiler.
fn check_argument(ty: &Type, last: bool) -> syn::Result<()> {
    match ty {
        Type::Reference(reference) => Err(syn::Error::new_spanned(
            reference,
            "handler arguments are owned extractors, not references: drop the `&`",
        )),
        Type::ImplTrait(_) | Type::Infer(_) => Err(syn::Error::new_spanned(
            ty,
            "handler arguments need a concrete extractor type",
        )),
        _ if !last => match last_segment(ty) {
            Some(name) if PAYLOAD_EXTRACTORS.contains(&name.as_str()) => {
                Err(syn::Error::new_spanned(
                    ty,
                    format!(
                        "`{name}` takes the job's payload, so it must be the last argument of the handler"
                    ),
                ))
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

impl HandlerSignature {
    /// A batch handler's item extractor: `X` of its last argument `Vec<X>`.
    pub(crate) fn batch_item(&self, function: &ItemFn) -> syn::Result<Type> {
        let Some(last) = self.args.last() else {
            return Err(syn::Error::new_spanned(
                &function.sig,
                "a batch handler takes its batch as its last argument: `Vec<Json<T>>`",
            ));
        };
        vec_item(last).ok_or_else(|| {
            syn::Error::new_spanned(
                last,
                "a batch handler's last argument is a `Vec` of an extractor: `Vec<Json<T>>`",
            )
        })
    }
}

/// `T` if `ty` is `Vec<T>`.
fn vec_item(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let segment = path.path.segments.last()?;
    if segment.ident != "Vec" {
        return None;
    }
    let PathArguments::AngleBracketed(generics) = &segment.arguments else {
        return None;
    };
    match generics.args.iter().collect::<Vec<_>>()[..] {
        [GenericArgument::Type(item)] => Some(item.clone()),
        _ => None,
    }
}

/// The name of a path type's last segment: `Json` for `handler::Json<T>`.
fn last_segment(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .map(|segment| segment.ident.to_string()),
        Type::Paren(paren) => last_segment(&paren.elem),
        Type::Group(group) => last_segment(&group.elem),
        _ => None,
    }
}

/// `T` if `ty` is `State<T>`.
fn state_type(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let segment = path.path.segments.last()?;
    if segment.ident != "State" {
        return None;
    }
    let PathArguments::AngleBracketed(generics) = &segment.arguments else {
        return None;
    };
    generics.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty.clone()),
        _ => None,
    })
}

/// Errors collected so that one compile reports all of them.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use quote::ToTokens;
    use syn::parse_quote;

    use super::*;

    fn errors(item: ItemFn) -> Vec<String> {
        match HandlerSignature::check(&item) {
            Ok(_) => Vec::new(),
            Err(error) => error.into_iter().map(|error| error.to_string()).collect(),
        }
    }

    #[test]
    fn a_valid_handler() -> syn::Result<()> {
        let item: ItemFn = parse_quote! {
            async fn send(meta: Meta, State(db): State<Db>, Json(sms): Json<Sms>) -> Result<(), E> {}
        };
        let sig = HandlerSignature::check(&item)?;
        assert_eq!(sig.args.len(), 3);
        assert_eq!(sig.state.to_token_stream().to_string(), "Db");
        assert_eq!(
            sig.output.to_token_stream().to_string(),
            "Result < () , E >"
        );
        Ok(())
    }

    #[test]
    fn no_arguments_no_output() -> syn::Result<()> {
        let sig = HandlerSignature::check(&parse_quote!(
            async fn tick() {}
        ))?;
        assert!(sig.args.is_empty() && sig.output.is_none() && sig.state.is_none());
        Ok(())
    }

    #[test]
    fn payload_extractors_must_be_last() {
        let found = errors(parse_quote! {
            async fn send(Json(sms): Json<Sms>, body: Bytes, meta: Meta) {}
        });
        assert_eq!(found.len(), 2);
        assert!(found[0].starts_with("`Json` takes the job's payload"));
        assert!(found[1].starts_with("`Bytes` takes the job's payload"));
        assert!(
            errors(parse_quote!(
                async fn send(meta: Meta, body: String) {}
            ))
            .is_empty()
        );
    }

    #[test]
    fn not_async_not_generic_no_self() {
        let found = errors(parse_quote!(
            fn send<T>(&self, body: String) {}
        ));
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("must be an `async fn`"));
        assert!(found[1].contains("cannot be generic"));
        assert!(found[2].contains("cannot take `self`"));
    }

    #[test]
    fn references_and_impl_trait() {
        let found = errors(parse_quote!(
            async fn send(meta: &Meta, body: impl Into<String>) {}
        ));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("not references"));
        assert!(found[1].contains("concrete extractor type"));
    }

    #[test]
    fn a_batch_handler_takes_a_vec_last() -> syn::Result<()> {
        let item: ItemFn = parse_quote! {
            async fn send(State(p): State<P>, emails: Vec<Json<Email>>) -> Vec<Result<(), E>> {}
        };
        let sig = HandlerSignature::check(&item)?;
        assert_eq!(
            sig.batch_item(&item)?.to_token_stream().to_string(),
            "Json < Email >"
        );
        let single: ItemFn = parse_quote!(
            async fn send(email: Json<Email>) {}
        );
        let sig = HandlerSignature::check(&single)?;
        let error = sig.batch_item(&single).err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("a batch handler's last argument is a `Vec` of an extractor: `Vec<Json<T>>`")
        );
        Ok(())
    }

    #[test]
    fn at_most_twelve_arguments() {
        let item: ItemFn = parse_quote! {
            async fn many(a: Meta, b: Meta, c: Meta, d: Meta, e: Meta, f: Meta, g: Meta, h: Meta,
                          i: Meta, j: Meta, k: Meta, l: Meta, m: Meta) {}
        };
        assert_eq!(errors(item), ["a handler takes at most 12 arguments"]);
    }
}
