"""The privacy core: noise families, exact samplers, privacy events, the accountant, sensitivities, the budget ledger."""
