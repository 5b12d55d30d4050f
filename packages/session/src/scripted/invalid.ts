import { errors, type TurnwardenError } from '@turnwarden/protocol';

/** The error of a malformed script: the message starts with the path of the bad field. */
export function invalidScript(path: string, problem: string): TurnwardenError {
  return errors.invalidScript(`${path} ${problem}`, { path });
}
