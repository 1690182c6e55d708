"""A small corpus of notes and paraphrased questions that share few words with their answers."""

PASSAGES = {
    "backup": "Nightly snapshots of the Postgres cluster are written to the S3 bucket "
    "acme-db-backups and kept for thirty days before lifecycle rules delete them.",
    "vpn": "To reach the staging network from home, start WireGuard with the wg-staging profile; "
    "the tunnel only accepts keys registered by the infrastructure team.",
    "oncall": "The on-call rotation changes every Monday at 10:00 UTC; swaps must be agreed in "
    "the #ops channel and recorded in PagerDuty.",
    "sourdough": "Feed the sourdough starter equal weights of rye flour and water twelve hours "
    "before baking, and keep it somewhere warm so it doubles.",
    "plants": "The fiddle-leaf fig by the window only needs water once the top two inches of "
    "soil are dry, roughly every ten days in winter.",
    "car": "The hatchback's next service is due at 45,000 km; the garage on Elm Street quoted "
    "280 euros including new brake pads.",
    "lisbon": "Maria relocated to Lisbon in March 2024 after accepting a product design role at "
    "a fintech startup there.",
    "allergy": "Tom is severely allergic to peanuts and carries an adrenaline auto-injector "
    "in his backpack at all times.",
    "release": "Releases are cut from the main branch every second Thursday; hotfixes go on a "
    "release branch and are cherry-picked back to main.",
    "err": "ERR_CONN_RESET in the gateway logs means the upstream service closed the socket; "
    "raise keepalive_timeout in the proxy config to fix it.",
    "tax": "The quarterly VAT return must be filed by the 7th of the second month after the "
    "quarter ends, or a late penalty of 5 percent applies.",
    "running": "Training plan: three easy runs a week plus one long run that grows by two "
    "kilometres each weekend until the half marathon in October.",
    "cat": "Whiskers gets half a pouch of wet food in the morning and dry kibble in the evening; "
    "no milk, it upsets her stomach.",
    "wifi": "The guest Wi-Fi password is printed on the card under the router and rotates on the "
    "first day of every month.",
    "piano": "Lena's piano lessons are on Wednesdays at 5 pm with Mr. Okafor; she is preparing "
    "a Chopin nocturne for the spring recital.",
    "rust": "Our Rust services pin the toolchain in rust-toolchain.toml so CI and laptops build "
    "with the same compiler version.",
}

QUESTIONS = {
    "Where do the database dumps get stored and for how long?": "backup",
    "How can I connect to the pre-production environment from my house?": "vpn",
    "When does the person responsible for incidents hand over duty?": "oncall",
    "What should I do the night before making bread?": "sourdough",
    "How often should the houseplant be watered?": "plants",
    "How much will the car maintenance cost?": "car",
    "Which city did Maria move to, and why?": "lisbon",
    "What food must Tom avoid?": "allergy",
    "How often do we ship a new version?": "release",
    "What does the connection reset error from the gateway mean?": "err",
    "When is the sales tax report due?": "tax",
    "How should I prepare for the 21 km race?": "running",
    "What does the pet eat each day?": "cat",
    "Where can visitors find the wireless network key?": "wifi",
    "When does the child practise music and what piece?": "piano",
    "How do we keep compiler versions consistent?": "rust",
}

# Questions nothing in PASSAGES answers, most sharing no words with it.
OFF_TOPIC = (
    "quantum chromodynamics lattice gluon propagators",
    "Who won the 1998 FIFA World Cup final?",
    "What is the boiling point of liquid nitrogen?",
    "Translate this sentence into Klingon",
    "best pizza toppings for a party",
    "How many moons does Jupiter have?",
    "Explain the causes of the French Revolution",
    "Who painted the Sistine Chapel ceiling?",
)
