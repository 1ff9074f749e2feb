"""The engine every command hands a plan to: plan records, staged write, verification, validation, publication, push."""
