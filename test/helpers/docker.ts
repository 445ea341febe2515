import { existsSync } from 'node:fs'

/** Whether a Docker engine answers here (testcontainers needs one; this machine kind has none). */
export async function dockerAvailable(): Promise<boolean> {
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) return false
  try {
    const { getContainerRuntimeClient } = await import('testcontainers')
    await getContainerRuntimeClient()
    return true
  } catch {
    return false
  }
}
