"""The workload stage: one seeded request set, from the generator or the user's own data."""
