//! Version 2 of the to-do list actor (`todo-v1`), the target of a live
//! upgrade (`stasis template push todo todo-v2.wasm`, then `stasis actor
//! upgrade NAME`). The routes are version 1's; `GET /` answers
//! `{"version":2,"items":N,"limit":L}`, and an item is
//! `{"id":ID,"title":T,"done":B,"priority":P}` (`POST` and `PUT` take a
//! `priority` too). Its state adds two fields with defaults, `limit` (how
//! many items the list holds, 100; a `POST` past it answers 409) and each
//! item's `priority` (0), and keeps state schema 1: the state version 1
//! hands over, CBOR with field names, loads as it is and takes those
//! defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stasis_guest_sdk::prelude::*;

#[derive(Serialize, Deserialize)]
struct Todo {
    next_id: u64,
    items: BTreeMap<u64, Item>,
    /// New in version 2; state from version 1 takes the default.
    #[serde(default = "default_limit")]
    limit: usize,
}

impl Default for Todo {
    fn default() -> Self {
        Todo {
            next_id: 0,
            items: BTreeMap::new(),
            limit: default_limit(),
        }
    }
}

fn default_limit() -> usize {
    100
}

#[derive(Serialize, Deserialize)]
struct Item {
    id: u64,
    title: String,
    done: bool,
    /// New in version 2; items from version 1 take 0.
    #[serde(default)]
    priority: u8,
}

/// The body of `POST /items`.
#[derive(Deserialize)]
struct NewItem {
    title: String,
    #[serde(default)]
    priority: u8,
}

/// The body of `PUT /items/ID`.
#[derive(Deserialize)]
struct Change {
    title: Option<String>,
    done: Option<bool>,
    priority: Option<u8>,
}

/// The answer of `GET /`.
#[derive(Serialize)]
struct About {
    version: u32,
    items: usize,
    limit: usize,
}

/// Schema 1, as in version 1: the added fields need no new schema.
impl State for Todo {}

impl Todo {
    fn about(&mut self, _: &Request, _: &Params) -> Response {
        Response::json(&About {
            version: 2,
            items: self.items.len(),
            limit: self.limit,
        })
    }

    fn list(&mut self, _: &Request, _: &Params) -> Response {
        Response::json(&self.items.values().collect::<Vec<_>>())
    }

    fn add(&mut self, req: &Request, _: &Params) -> Result<Response, HttpError> {
        let new: NewItem = req.json()?;
        if self.items.len() >= self.limit {
            let full = format!("the list holds {} items at most", self.limit);
            return Err(HttpError::new(409, full));
        }
        self.next_id += 1;
        let item = Item {
            id: self.next_id,
            title: new.title,
            done: false,
            priority: new.priority,
        };
        let answer = Response::json(&item)
            .with_status(201)
            .with_header("location", format!("/items/{}", item.id));
        self.items.insert(item.id, item);
        Ok(answer)
    }

    /// The item the path's `id` names.
    fn item(&mut self, params: &Params) -> Result<&mut Item, HttpError> {
        let id: u64 = params.parse("id")?;
        self.items
            .get_mut(&id)
            .ok_or_else(|| HttpError::new(404, format!("no item {id}")))
    }

    fn get(&mut self, _: &Request, params: &Params) -> Result<Response, HttpError> {
        Ok(Response::json(self.item(params)?))
    }

    fn change(&mut self, req: &Request, params: &Params) -> Result<Response, HttpError> {
        let change: Change = req.json()?;
        let item = self.item(params)?;
        if let Some(title) = change.title {
            item.title = title;
        }
        if let Some(done) = change.done {
            item.done = done;
        }
        if let Some(priority) = change.priority {
            item.priority = priority;
        }
        Ok(Response::json(item))
    }

    fn delete(&mut self, _: &Request, params: &Params) -> Result<Response, HttpError> {
        let id = self.item(params)?.id;
        self.items.remove(&id);
        Ok(Response::empty(204))
    }
}

impl Actor for Todo {
    fn handle(&mut self, req: Request) -> Response {
        Router::new()
            .get("/", Todo::about)
            .get("/items", Todo::list)
            .post("/items", Todo::add)
            .get("/items/:id", Todo::get)
            .put("/items/:id", Todo::change)
            .delete("/items/:id", Todo::delete)
            .handle(self, &req)
    }
}

export_actor!(Todo, state);
