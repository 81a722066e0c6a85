//! `share-worker status`: the group's state, its members with their assignments, and its start
//! offset and lag on every partition of the route topics (ShareGroupDescribe +
//! DescribeShareGroupOffsets), like Kafka's `kafka-share-groups --describe --members --offsets`.

use crate::config::Config;
use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};
use std::time::SystemTime;
use worker_core::control::Pause;
use worker_core::kafka::{Admin, PartitionOffsets, ShareGroupDescription};

use crate::ConfigArg;

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn status(config: &Config, args: &StatusArgs) -> anyhow::Result<()> {
    let bootstrap = &config.kafka.bootstrap;
    let group = &config.worker.group;
    let admin = Admin::connect_with(bootstrap.as_str(), &config.security()?)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    let description = admin
        .describe_share_group(group)
        .await
        .with_context(|| format!("describing share group {group}"))?;
    let topics: Vec<&str> = config.topics().collect();
    let offsets = admin
        .share_group_backlog(group, &topics)
        .await
        .with_context(|| format!("reading the share offsets of group {group}"))?;
    let controls = match &config.control {
        Some(section) => {
            let topic = config.control_topic()?;
            let state = topic
                .read(section.read_timeout)
                .await
                .with_context(|| format!("reading control topic {}", topic.name()))?;
            let now = SystemTime::now();
            Some((
                state.pauses(now).cloned().collect::<Vec<_>>(),
                state.cancellations(now),
            ))
        }
        None => None,
    };
    if args.json {
        let mut json = to_json(group, &description, &offsets);
        if let Some((pauses, cancelled)) = &controls {
            json["paused"] = pauses.iter().map(pause_json).collect();
            json["cancelled_jobs"] = json!(cancelled);
        }
        println!("{json}");
    } else {
        print!("{}", to_tables(group, &description, &offsets));
        if let Some((pauses, cancelled)) = &controls {
            print!("{}", pause_table(pauses));
            println!("job cancellations in force: {cancelled}");
        }
    }
    Ok(())
}

fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

fn pause_json(pause: &Pause) -> Value {
    json!({
        "topic": pause.topic,
        "until": pause.until.map(time),
        "reason": pause.reason,
        "by": pause.by,
        "at": time(pause.at),
    })
}

/// The routes paused fleet-wide; reason and issuer are untrusted text, shown escaped.
fn pause_table(pauses: &[Pause]) -> String {
    if pauses.is_empty() {
        return "no route is paused\n".to_owned();
    }
    let rows: Vec<Vec<String>> = pauses
        .iter()
        .map(|p| {
            vec![
                p.topic.clone(),
                p.until.map_or_else(|| "resume".to_owned(), time),
                p.reason.escape_debug().to_string(),
                p.by.escape_debug().to_string(),
                time(p.at),
            ]
        })
        .collect();
    table(&["PAUSED-TOPIC", "UNTIL", "REASON", "BY", "SINCE"], &rows)
}

/// -1 (no state / unknown) is `null`.
fn known(value: i64) -> Value {
    if value < 0 { Value::Null } else { json!(value) }
}

fn to_json(
    group: &str,
    description: &ShareGroupDescription,
    offsets: &[PartitionOffsets],
) -> Value {
    json!({
        "group": group,
        "state": description.state,
        "epoch": description.epoch,
        "members": description.members.iter().map(|m| json!({
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.host,
            "assignment": m.assignment.iter().map(|(topic, partition)| json!({
                "topic": topic,
                "partition": partition,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "offsets": offsets.iter().map(|o| json!({
            "topic": o.topic,
            "partition": o.partition,
            "start_offset": known(o.start_offset),
            "lag": known(o.lag),
        })).collect::<Vec<_>>(),
    })
}

/// Left-aligned columns two spaces apart.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn dash_if_unknown(value: i64) -> String {
    if value < 0 {
        "-".to_owned()
    } else {
        value.to_string()
    }
}

/// `topic:0,1;other:2`, like `kafka-share-groups --members`.
fn assignment(pairs: &[(String, i32)]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<(&str, Vec<String>)> = None;
    for (topic, partition) in pairs {
        match &mut current {
            Some((t, parts)) if *t == topic.as_str() => parts.push(partition.to_string()),
            _ => {
                if let Some((t, parts)) = current.take() {
                    out.push(format!("{t}:{}", parts.join(",")));
                }
                current = Some((topic.as_str(), vec![partition.to_string()]));
            }
        }
    }
    if let Some((t, parts)) = current {
        out.push(format!("{t}:{}", parts.join(",")));
    }
    if out.is_empty() {
        "-".to_owned()
    } else {
        out.join(";")
    }
}

fn to_tables(
    group: &str,
    description: &ShareGroupDescription,
    offsets: &[PartitionOffsets],
) -> String {
    let mut out = table(
        &["GROUP", "STATE", "#MEMBERS"],
        &[vec![
            group.to_owned(),
            description.state.clone(),
            description.members.len().to_string(),
        ]],
    );
    out.push('\n');
    let rows: Vec<Vec<String>> = offsets
        .iter()
        .map(|o| {
            vec![
                group.to_owned(),
                o.topic.clone(),
                o.partition.to_string(),
                dash_if_unknown(o.start_offset),
                dash_if_unknown(o.lag),
            ]
        })
        .collect();
    out.push_str(&table(
        &["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
        &rows,
    ));
    out.push('\n');
    if description.members.is_empty() {
        out.push_str(&format!("share group {group} has no active members\n"));
    } else {
        let rows: Vec<Vec<String>> = description
            .members
            .iter()
            .map(|m| {
                vec![
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.host.clone(),
                    assignment(&m.assignment),
                ]
            })
            .collect();
        out.push_str(&table(
            &["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
            &rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_group_partitions_by_topic() {
        let pairs = vec![
            ("a".to_owned(), 0),
            ("a".to_owned(), 1),
            ("b".to_owned(), 2),
        ];
        assert_eq!(assignment(&pairs), "a:0,1;b:2");
        assert_eq!(assignment(&[]), "-");
    }

    #[test]
    fn tables_align_columns() {
        let out = table(&["A", "LONGER"], &[vec!["wide-cell".into(), "1".into()]]);
        assert_eq!(out, "A          LONGER\nwide-cell  1\n");
    }
}
