//! The expansion of `#[handler]`: a unit struct implementing `JobDefinition`, plus per-argument
//! checks spanned to the arguments.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Ident, ItemFn, LitStr, Path, Type};

use crate::args::HandlerArgs;
use crate::signature::HandlerSignature;

/// Expands `#[handler(args)] item`. On error: `item` unchanged, followed by `compile_error!`s.
pub(crate) fn handler(args: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(error) => {
            let error = syn::Error::new(error.span(), "`#[handler]` goes on an `async fn`");
            return with_errors(item, error);
        }
    };
    let checked = HandlerArgs::parse(args).and_then(|args| {
        let signature = HandlerSignature::check(&function)?;
        Ok((args, signature))
    });
    match checked {
        Ok((args, signature)) => generate(&args, &signature, function),
        Err(error) => with_errors(item, error),
    }
}

/// The original item and the errors, so that IDEs still see the function.
fn with_errors(item: TokenStream, error: syn::Error) -> TokenStream {
    let errors = error.to_compile_error();
    quote!(#item #errors)
}

/// The code for a handler that passed the syntactic checks.
fn generate(args: &HandlerArgs, signature: &HandlerSignature, function: ItemFn) -> TokenStream {
    let krate = &args.krate;
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = function;
    let ident = sig.ident.clone();
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| LitStr::new(&ident_name(&ident), ident.span()));
    let topic = &args.topic;
    sig.ident = Ident::new("handle", ident.span());

    let docs: Vec<&Attribute> = attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .collect();
    let struct_docs = if docs.is_empty() {
        let doc = format!("The `{}` job (`#[handler]`).", name.value());
        quote!(#[doc = #doc])
    } else {
        quote!(#(#docs)*)
    };
    let handle_docs = if docs.is_empty() {
        quote!(#[doc = "The handler function as written."])
    } else {
        TokenStream::new()
    };

    let definition = definition_impl(krate, &ident, signature);
    let enqueue = enqueue_fns(krate, &vis, signature);
    let send_handle = send_handle(krate, &ident, signature);
    let checks = checks(krate, args.state.as_ref(), signature);

    quote! {
        #struct_docs
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident;

        impl #ident {
            /// The job's name, for logs, metrics and dead-letter records.
            #vis const NAME: &'static str = #name;
            /// The topic the job reads unless configuration overrides it.
            #vis const TOPIC: &'static str = #topic;

            #handle_docs
            #(#attrs)*
            #vis #sig #block

            #send_handle

            #enqueue
        }

        #definition
        #checks
    }
}

/// The function's name without a raw-identifier prefix.
fn ident_name(ident: &Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map(str::to_owned).unwrap_or(name)
}

/// `handle` behind a signature the runtime can use as it is: the output is converted into an
/// `Outcome` (a return type that is no `IntoOutcome` fails here, on the return type) and the
/// future promises `Send` (one that is not fails here, on the function's name, with the
/// compiler's note on the value held across an `.await`). Nothing else fails for these reasons.
fn send_handle(krate: &Path, ident: &Ident, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let names: Vec<Ident> = (0..signature.args.len())
        .map(|index| format_ident!("__arg{}", index))
        .collect();
    let types = &signature.args;
    let into_outcome = match &signature.output {
        Some(ty) => quote_spanned!(ty.span()=> #private::IntoOutcome::into_outcome(output)),
        None => quote!(#private::IntoOutcome::into_outcome(output)),
    };
    let future = quote_spanned! {ident.span()=>
        impl #private::Future<Output = #private::Outcome> + #private::Send + 'static
    };
    quote! {
        #[doc(hidden)]
        #[allow(clippy::too_many_arguments)]
        fn __handle_send(#(#names: #types),*) -> #future {
            let future = Self::handle(#(#names),*);
            async move {
                let output = future.await;
                #into_outcome
            }
        }
    }
}

/// The typed producer side: `enqueue(&producer, &payload)` and `enqueue_with(.., options)`, whose
/// payload type is the one the job's last argument decodes (`Json<Sms>` takes `&Sms`), so a
/// payload of another type is a compile error at the call. The bound is higher-ranked, so the
/// compiler checks it where `enqueue` is called, not where it is defined: a job whose last
/// argument has no enqueueable payload (`Meta`, `Job`) still compiles. A job without arguments
/// gets none.
fn enqueue_fns(krate: &Path, vis: &syn::Visibility, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let Some(last) = signature.args.last() else {
        return TokenStream::new();
    };
    quote! {
        #private::with_job_producer! {
        /// Enqueues a job for this handler on its topic ([`Self::TOPIC`]), with the payload type
        /// the handler takes; returns once the broker confirmed it.
        #vis async fn enqueue(
            producer: &#private::JobProducer,
            payload: &<#last as #private::Payload>::Value,
        ) -> #private::Result<#private::Enqueued>
        where
            for<'__a> #last: #private::Payload,
        {
            producer
                .enqueue_as::<#last>(Self::TOPIC, payload, #private::EnqueueOptions::new())
                .await
        }

        /// [`enqueue`](Self::enqueue) with a key, headers, a time to run or another topic.
        #vis async fn enqueue_with(
            producer: &#private::JobProducer,
            payload: &<#last as #private::Payload>::Value,
            options: #private::EnqueueOptions,
        ) -> #private::Result<#private::Enqueued>
        where
            for<'__a> #last: #private::Payload,
        {
            producer.enqueue_as::<#last>(Self::TOPIC, payload, options).await
        }
        }
    }
}

/// `impl NamedJob` and `impl JobDefinition` (generic over the worker's state) for the unit
/// struct.
///
/// Every bound mentions `__S`, so an argument that does not fit never fails here (the impl just
/// does not apply); the spanned [`checks`] report it instead, once.
fn definition_impl(krate: &Path, ident: &Ident, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let (marker_param, args_tuple, bounds) = match signature.args.split_last() {
        None => (TokenStream::new(), quote!(((),)), TokenStream::new()),
        Some((last, leading)) => (
            quote!(__M,),
            quote!((__M, #(#leading,)* #last,)),
            quote! {
                __M: 'static,
                #(#leading: #private::FromJobParts<__S>,)*
                #last: #private::FromJob<__S, __M>,
            },
        ),
    };
    quote! {
        impl #private::NamedJob for #ident {
            fn name(&self) -> &'static str {
                Self::NAME
            }

            fn topic(&self) -> &'static str {
                Self::TOPIC
            }
        }

        impl<__S, #marker_param> #private::JobDefinition<#args_tuple, __S> for #ident
        where
            __S: ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static,
            #bounds
        {

            fn into_service(
                self,
                state: __S,
            ) -> impl #private::Service<
                #private::Job,
                Response = #private::Outcome,
                Error = #private::Infallible,
                Future: ::core::marker::Send + 'static,
            > + ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static {
                #private::HandlerService::new(Self::__handle_send, state)
            }
        }
    }
}

/// Compile-time checks, each spanned to its argument, so that a type error lands on the offending
/// argument rather than on the attribute. Arguments are checked against
/// the declared state (`state = T`), else `T` of the first `State<T>` argument, else `()`.
fn checks(krate: &Path, state: Option<&Type>, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let state = state
        .or(signature.state.as_ref())
        .map_or_else(|| quote!(()), |state| quote!(#state));
    let count = signature.args.len();
    let argument_checks = signature.args.iter().enumerate().map(|(index, ty)| {
        if index + 1 == count {
            quote_spanned!(ty.span()=> #private::assert_from_job::<#state, _, #ty>();)
        } else {
            quote_spanned!(ty.span()=> #private::assert_from_job_parts::<#state, #ty>();)
        }
    });
    quote! {
        const _: () = {
            #[allow(dead_code)]
            fn __handler_signature_is_valid() {
                #(#argument_checks)*
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn expand(args: TokenStream, item: TokenStream) -> String {
        handler(args, item).to_string()
    }

    #[test]
    fn generates_a_definition_and_keeps_the_function() {
        let out = expand(
            quote!(topic = "sms", name = "send_sms"),
            quote! {
                /// Sends one SMS.
                pub async fn send_sms(meta: Meta, Json(sms): Json<Sms>) -> Result<(), JobError> {
                    Ok(())
                }
            },
        );
        assert!(out.contains("# [doc = r\" Sends one SMS.\"] # [allow (non_camel_case_types)]"));
        assert!(out.contains("pub struct send_sms ;"));
        assert!(out.contains("pub const NAME : & 'static str = \"send_sms\" ;"));
        assert!(out.contains("pub const TOPIC : & 'static str = \"sms\" ;"));
        assert!(out.contains("pub async fn handle (meta : Meta , Json (sms) : Json < Sms >)"));
        assert!(out.contains("JobDefinition < (__M , Meta , Json < Sms > ,) , __S > for send_sms"));
        assert!(out.contains("Meta : :: worker_core :: __private :: FromJobParts < __S >"));
        assert!(
            out.contains("Json < Sms > : :: worker_core :: __private :: FromJob < __S , __M >")
        );
        assert!(out.contains("assert_from_job_parts :: < () , Meta > ()"));
        assert!(out.contains("assert_from_job :: < () , _ , Json < Sms > > ()"));
        assert!(out.contains("let output = future . await ; :: worker_core :: __private :: IntoOutcome :: into_outcome (output)"));
        assert!(out.contains("fn __handle_send (__arg0 : Meta , __arg1 : Json < Sms >)"));
        assert!(out.contains(
            "Output = :: worker_core :: __private :: Outcome > + :: worker_core :: __private :: Send + 'static"
        ));
        assert!(out.contains("HandlerService :: new (Self :: __handle_send , state)"));
        assert!(out.contains(
            "payload : & < Json < Sms > as :: worker_core :: __private :: Payload > :: Value"
        ));
        assert!(
            out.contains(
                "where for < '__a > Json < Sms > : :: worker_core :: __private :: Payload"
            )
        );
        assert!(out.contains("enqueue_as :: < Json < Sms > > (Self :: TOPIC , payload"));
        assert!(!out.contains("compile_error"));
    }

    #[test]
    fn name_defaults_to_the_function_and_state_to_the_state_argument() {
        let out = expand(
            quote!(topic = "mail", crate = "::wc"),
            quote!(
                async fn r#send(State(db): State<Db>) {}
            ),
        );
        assert!(out.contains("const NAME : & 'static str = \"send\""));
        assert!(out.contains("# [doc = \"The `send` job (`#[handler]`).\"]"));
        assert!(out.contains("# [doc = \"The handler function as written.\"]"));
        assert!(out.contains(":: wc :: __private :: assert_from_job :: < Db , _ , State < Db > >"));
        assert!(!out.contains("worker_core"));
    }

    #[test]
    fn explicit_state_wins() {
        let out = expand(
            quote!(topic = "mail", state = App),
            quote!(
                async fn send(State(db): State<Db>, meta: Meta) {}
            ),
        );
        assert!(out.contains("assert_from_job_parts :: < App , State < Db > >"));
    }

    #[test]
    fn no_arguments() {
        let out = expand(
            quote!(topic = "tick"),
            quote!(
                async fn tick() {}
            ),
        );
        assert!(out.contains(
            "impl < __S , > :: worker_core :: __private :: JobDefinition < (() ,) , __S > for tick"
        ));
        assert!(out.contains("fn __handle_send () -> impl :: worker_core :: __private :: Future"));
        assert!(!out.contains("fn enqueue"), "no payload, no typed enqueue");
    }

    #[test]
    fn errors_keep_the_function() {
        let out = expand(
            quote!(topic = "sms"),
            quote!(
                fn send(body: String) {}
            ),
        );
        assert!(out.starts_with("fn send (body : String) { }"));
        assert!(
            out.contains("compile_error ! { \"a `#[handler]` function must be an `async fn`\" }")
        );
        assert!(!out.contains("struct"));

        let out = expand(
            quote!(),
            quote!(
                async fn send() {}
            ),
        );
        assert!(out.starts_with("async fn send () { }"));
        assert!(out.contains("needs a default topic"));

        let out = expand(
            quote!(topic = "sms"),
            quote!(
                struct NotAFunction;
            ),
        );
        assert!(out.starts_with("struct NotAFunction ;"));
        assert!(out.contains("goes on an `async fn`"));
    }
}
