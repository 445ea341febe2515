/**
 * burnrate-client: report an AI agent's LLM calls, tool calls, start and end to burnrate,
 * and stop when its budget is spent. Zero dependencies: global fetch, AbortController and
 * Web Crypto; runs on Node 18+, browsers and edge runtimes.
 */
export { Burnrate } from './client.js'
export type { BurnrateOptions, RefreshOptions, WaitOptions } from './client.js'
export { BurnrateError } from './errors.js'
export type { BurnrateErrorInit, LocalErrorCode } from './errors.js'
export { fromAnthropic, fromOpenAIChat, fromOpenAIResponses, fromUsage } from './usage.js'
export type { ProviderUsage, UsageSource } from './usage.js'
export type { FetchLike } from './http.js'
export type { AlertInfo, BufferOptions, BurnrateEvent, CalendarBudget, EventExtras, EventResponse, EventType, FailMode, GuardCall, GuardRefusalReason, GuardResult, Hold, HoldResponse, LlmUsage, Metadata, Operation, Period, PeriodBudget, PeriodResponse, Problem, RollingBudget, SendOptions } from './types.js'
