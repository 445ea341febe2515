/**
 * The README's usage-helper lines against the SDKs' own types, compiled by
 * `npm run typecheck` under `strict` and never run (they would call the providers). The
 * SDKs are dev dependencies of the repository's tests, not of the client: the client takes
 * any usage object, `undefined` and `null` included, as the SDKs type `usage`.
 */
import type Anthropic from '@anthropic-ai/sdk'
import type OpenAI from 'openai'
import type { Burnrate } from '../src/index.ts'

export async function readmeExamples(burnrate: Burnrate, openai: OpenAI, anthropic: Anthropic): Promise<void> {
  const completion = await openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] })
  if (!(await burnrate.fromOpenAIChat(completion.model, completion.usage))) return // over budget: stop now

  const response = await openai.responses.create({ model: 'o4-mini', input: 'hi' })
  await burnrate.fromOpenAIResponses(response.model, response.usage)

  const message = await anthropic.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 256, messages: [{ role: 'user', content: 'hi' }] })
  await burnrate.fromAnthropic(message.model, message.usage)
}

/** The SDK types of the usage objects are what the helpers take. */
export function usageTypes(chat: OpenAI.CompletionUsage | undefined, responses: OpenAI.Responses.ResponseUsage | undefined, messages: Anthropic.Usage, burnrate: Burnrate): void {
  void burnrate.fromOpenAIChat('gpt-4o', chat)
  void burnrate.fromOpenAIResponses('o4-mini', responses)
  void burnrate.fromAnthropic('claude-sonnet-4-5', messages)
}
