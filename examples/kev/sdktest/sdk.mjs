// Drives a running `kev serve` with the official TypeSafe JS SDK, used as its README shows, and prints what it got
// as one JSON object on standard output; TestTypeSafeSDK (examples/kev/sdk_test.go) checks it.
//
//   KEV_URL=http://127.0.0.1:8008 KEV_KEY=secret node sdk.mjs
import {
  APIError,
  AuthenticationError,
  TypeSafeClient,
  TypeSafeError,
  UnprocessableEntityError,
  VERSION,
  choice,
  noul,
  score,
} from "@typesafe-ai/sdk";

const baseURL = process.env.KEV_URL;
const apiKey = process.env.KEV_KEY;
if (!baseURL || !apiKey) {
  console.error("set KEV_URL and KEV_KEY");
  process.exit(2);
}
// No retries: a failure must show at once, not after back-off.
const options = { baseURL, retry: { maxRetries: 0 }, logLevel: "off", timeout: 60000 };
const client = new TypeSafeClient({ ...options, apiKey });
const out = { sdk: VERSION, defaultModel: client.defaultModel };

// What an error surfaced as: its SDK class and what it carries.
const describe = (e) => ({
  class: e?.constructor?.name,
  typeSafeError: e instanceof TypeSafeError,
  apiError: e instanceof APIError,
  unprocessable: e instanceof UnprocessableEntityError,
  authentication: e instanceof AuthenticationError,
  status: e?.status,
  body: e?.body,
  requestId: e?.requestId,
  message: String(e?.message),
});

// 1. The models.
out.models = await client.models.list();

// 2. A ticket with one question of each type, with the client's default model.
const ticket = {
  state: "I was charged twice for order 1042 and the shoes arrived in the wrong size. Please fix this today.",
  questions: {
    billing: noul("Is this about a payment?"),
    department: choice("Which team should handle this?", {
      returns: "Exchanges, refunds, wrong or damaged items",
      shipping: "Delivery status, delays, lost packages",
      billing: null,
    }),
    urgency: score("How urgent is it?", ["Can wait", "This week", "Today", "Right now"]),
  },
};
{
  const { data, requestId, response } = await client.systemOne(ticket).withResponse();
  out.ticket = { request: { ...ticket, model: client.defaultModel }, response: data, requestId, status: response.status };
}

// 3. Structured state and instructions (JSON objects and arrays), a noul with described outcomes, a choice with
//    undescribed and structured labels, and an explicit model.
const structured = {
  model: "kev-latest",
  state: {
    customer: { name: "Ada", plan: "pro", since: 2019, verified: true, credit: 12.5 },
    messages: [
      { from: "customer", text: "The package never came." },
      { from: "agent", text: "It shows as delivered on Monday." },
      { from: "customer", text: "It is not here. I want my money back." },
    ],
    tags: ["shipping", null],
  },
  questions: {
    refund: noul({ ask: "Does the customer want a refund?", consider: ["tone", "history"] }, {
      true: "Wants the money back",
      false: "Wants something else",
    }),
    channel: choice(null, { email: null, phone: { note: "pro plans only" }, chat: ["fast", "async"] }),
    mood: score({ rate: "the customer's mood" }, [null, "Annoyed", { level: "Angry", say: "all caps" }]),
  },
};
{
  const { data, requestId } = await client.systemOne(structured).withResponse();
  out.structured = { request: structured, response: data, requestId };
}

// 4. A request the server refuses (a choice needs at least one label): HTTP 422 as the SDK's typed error.
try {
  await client.systemOne({ state: "Where is my order?", questions: { team: choice("Which team?", {}) } });
  out.invalid = { thrown: false };
} catch (e) {
  out.invalid = { thrown: true, ...describe(e) };
}

// 5. A wrong key: HTTP 401 as the SDK's typed error.
try {
  await new TypeSafeClient({ ...options, apiKey: "not-the-key" }).systemOne(ticket);
  out.unauthorized = { thrown: false };
} catch (e) {
  out.unauthorized = { thrown: true, ...describe(e) };
}

console.log(JSON.stringify(out));
