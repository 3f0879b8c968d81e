//! Version 1 of the to-do list actor: a JSON API on the guest SDK's
//! router. `GET /` answers `{"version":1,"items":N}`; `GET /items` lists
//! the items; `POST /items` with `{"title":T}` adds one (201 with the item
//! and `location: /items/ID`); `GET /items/ID`, `PUT /items/ID` with
//! `{"title":T,"done":B}` (either field may be left out) and `DELETE
//! /items/ID` (204) act on one. An item is `{"id":ID,"title":T,"done":B}`.
//! Other paths answer 404, other methods on these paths 405 with `allow`;
//! a body that is not the JSON expected answers 400, one of another
//! content type 415, an unknown item 404.
//!
//! Its state is handed over at a live upgrade (`impl State`, the SDK's
//! default format, CBOR with field names): `todo-v2` adds fields with
//! defaults and keeps the same schema.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stasis_guest_sdk::prelude::*;

#[derive(Default, Serialize, Deserialize)]
struct Todo {
    next_id: u64,
    items: BTreeMap<u64, Item>,
}

#[derive(Serialize, Deserialize)]
struct Item {
    id: u64,
    title: String,
    done: bool,
}

/// The body of `POST /items`.
#[derive(Deserialize)]
struct NewItem {
    title: String,
}

/// The body of `PUT /items/ID`.
#[derive(Deserialize)]
struct Change {
    title: Option<String>,
    done: Option<bool>,
}

/// The answer of `GET /`.
#[derive(Serialize)]
struct About {
    version: u32,
    items: usize,
}

/// Schema 1 (the default), in the SDK's self-describing format.
impl State for Todo {}

impl Todo {
    fn about(&mut self, _: &Request, _: &Params) -> Response {
        Response::json(&About {
            version: 1,
            items: self.items.len(),
        })
    }

    fn list(&mut self, _: &Request, _: &Params) -> Response {
        Response::json(&self.items.values().collect::<Vec<_>>())
    }

    fn add(&mut self, req: &Request, _: &Params) -> Result<Response, HttpError> {
        let new: NewItem = req.json()?;
        self.next_id += 1;
        let item = Item {
            id: self.next_id,
            title: new.title,
            done: false,
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
